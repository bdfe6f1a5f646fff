package directory

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Seat is what a seat token says: the player may take a seat in the room until Expires.
type Seat struct {
	Room    string
	Player  string
	Expires time.Time // wall clock, millisecond precision
}

// SeatConfig configures a SeatSigner.
type SeatConfig struct {
	// Key signs tokens (HMAC-SHA256). Every node of a cluster has the same key. At least
	// 32 bytes.
	Key []byte
	// OldKeys also verify tokens (not sign them): a key being rotated out stays here until
	// the tokens it signed have expired. Each at least 32 bytes.
	OldKeys [][]byte
	// TTL is how long a token stays valid after Sign. 0 means 30 s.
	TTL time.Duration
	// Skew is how long after its expiry a token is still accepted, for the difference
	// between the signing and the verifying node's wall clocks. 0 means none.
	Skew time.Duration
	// Now returns the wall clock time; nil means time.Now. Tests set it.
	Now func() time.Time
}

// Seat token limits and defaults.
const (
	minSeatKeyLen  = 32
	defaultSeatTTL = 30 * time.Second
	// maxSeatTokenLen bounds a token's length: longer ones are refused before decoding.
	maxSeatTokenLen = 1024
)

// seatVersion is the first byte of a token's payload.
const seatVersion = 1

// seatContext is prepended to the payload before signing, so that a MAC made with the
// same key for another purpose never passes for a seat token.
const seatContext = "baton seat token\x00"

// Errors of Verify; each wrapped with details.
var (
	ErrSeatMalformed = errors.New("directory: malformed seat token")
	ErrSeatSignature = errors.New("directory: seat token signature does not match")
	ErrSeatExpired   = errors.New("directory: seat token expired")
)

// SeatSigner signs and verifies seat tokens: a token names a room and a player and
// expires; anyone holding the key can make one, so the key stays among the nodes. A token
// can be replayed until it expires, by whoever holds it, to seat the player it names.
// Safe for concurrent use.
type SeatSigner struct {
	key  []byte
	keys [][]byte // key first, then the old keys
	ttl  time.Duration
	skew time.Duration
	now  func() time.Time
}

// NewSeatSigner returns a signer, or an error naming the invalid field of cfg. Any
// goroutine.
func NewSeatSigner(cfg SeatConfig) (*SeatSigner, error) {
	if len(cfg.Key) < minSeatKeyLen {
		return nil, fmt.Errorf("directory: SeatConfig.Key is %d bytes, fewer than %d", len(cfg.Key), minSeatKeyLen)
	}
	for i, k := range cfg.OldKeys {
		if len(k) < minSeatKeyLen {
			return nil, fmt.Errorf("directory: SeatConfig.OldKeys[%d] is %d bytes, fewer than %d", i, len(k), minSeatKeyLen)
		}
	}
	switch {
	case cfg.TTL < 0:
		return nil, fmt.Errorf("directory: SeatConfig.TTL (%v) must not be negative", cfg.TTL)
	case cfg.Skew < 0:
		return nil, fmt.Errorf("directory: SeatConfig.Skew (%v) must not be negative", cfg.Skew)
	}
	s := &SeatSigner{key: clone(cfg.Key), ttl: cfg.TTL, skew: cfg.Skew, now: cfg.Now}
	if s.ttl == 0 {
		s.ttl = defaultSeatTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.keys = append(s.keys, s.key)
	for _, k := range cfg.OldKeys {
		s.keys = append(s.keys, clone(k))
	}
	return s, nil
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// Sign returns a token seating player in room until now + TTL. Any goroutine.
func (s *SeatSigner) Sign(room, player string) (string, error) {
	if err := CheckRoom(room); err != nil {
		return "", fmt.Errorf("directory: seat: %w: room: %w", ErrInvalid, err)
	}
	if err := checkName(player, false); err != nil {
		return "", fmt.Errorf("directory: seat: %w: player: %w", ErrInvalid, err)
	}
	exp := s.now().Add(s.ttl).UnixMilli()
	payload := make([]byte, 0, 1+8+2*binary.MaxVarintLen16+len(room)+len(player))
	payload = append(payload, seatVersion)
	payload = binary.BigEndian.AppendUint64(payload, uint64(exp))
	payload = binary.AppendUvarint(payload, uint64(len(room)))
	payload = append(payload, room...)
	payload = binary.AppendUvarint(payload, uint64(len(player)))
	payload = append(payload, player...)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(mac(s.key, payload)), nil
}

// Verify checks token's form, signature (by Key or one of OldKeys) and expiry, and returns
// what it says. Errors match ErrSeatMalformed, ErrSeatSignature or ErrSeatExpired. The
// caller checks that Seat.Room is the room being joined. Any goroutine.
func (s *SeatSigner) Verify(token string) (Seat, error) {
	seat, payload, sig, err := parseSeat(token)
	if err != nil {
		return Seat{}, err
	}
	ok := false
	for _, k := range s.keys {
		if hmac.Equal(sig, mac(k, payload)) {
			ok = true
			break
		}
	}
	if !ok {
		return Seat{}, fmt.Errorf("%w (room %q, player %q)", ErrSeatSignature, seat.Room, seat.Player)
	}
	if now := s.now(); !now.Before(seat.Expires.Add(s.skew)) {
		return Seat{}, fmt.Errorf("%w: room %q, player %q, expired at %s, %v ago", ErrSeatExpired,
			seat.Room, seat.Player, seat.Expires.UTC().Format(time.RFC3339Nano), now.Sub(seat.Expires).Round(time.Millisecond))
	}
	return seat, nil
}

func mac(key, payload []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(seatContext))
	h.Write(payload)
	return h.Sum(nil)
}

// parseSeat splits and decodes a token without checking its signature or expiry.
func parseSeat(token string) (seat Seat, payload, sig []byte, err error) {
	bad := func(why string, args ...any) (Seat, []byte, []byte, error) {
		return Seat{}, nil, nil, fmt.Errorf("%w: %s", ErrSeatMalformed, fmt.Sprintf(why, args...))
	}
	if len(token) > maxSeatTokenLen {
		return bad("%d bytes, longer than %d", len(token), maxSeatTokenLen)
	}
	p64, s64, ok := strings.Cut(token, ".")
	if !ok {
		return bad("no '.' between payload and signature")
	}
	enc := base64.RawURLEncoding.Strict()
	if payload, err = enc.DecodeString(p64); err != nil {
		return bad("payload: %v", err)
	}
	if sig, err = enc.DecodeString(s64); err != nil {
		return bad("signature: %v", err)
	}
	if len(sig) != sha256.Size {
		return bad("signature of %d bytes, not %d", len(sig), sha256.Size)
	}
	if len(payload) < 1+8 {
		return bad("payload of %d bytes, too short", len(payload))
	}
	if payload[0] != seatVersion {
		return bad("version %d, not %d", payload[0], seatVersion)
	}
	exp := int64(binary.BigEndian.Uint64(payload[1:9]))
	rest := payload[9:]
	field := func(name string) (string, error) {
		n, k := binary.Uvarint(rest)
		if k <= 0 {
			return "", fmt.Errorf("%s: bad length", name)
		}
		if n > uint64(len(rest)-k) {
			return "", fmt.Errorf("%s: length %d past the end", name, n)
		}
		v := string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
		if err := checkName(v, false); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return v, nil
	}
	if seat.Room, err = field("room"); err != nil {
		return bad("%v", err)
	}
	if seat.Player, err = field("player"); err != nil {
		return bad("%v", err)
	}
	if len(rest) != 0 {
		return bad("%d bytes after the player", len(rest))
	}
	seat.Expires = time.UnixMilli(exp)
	return seat, payload, sig, nil
}
