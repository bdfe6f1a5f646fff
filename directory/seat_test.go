package directory

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	seatKey  = bytes.Repeat([]byte{0x5a}, minSeatKeyLen)
	otherKey = bytes.Repeat([]byte{0xa5}, minSeatKeyLen)
)

// fakeNow is a settable wall clock for seat tests.
type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time { return f.t }

func newSigner(t *testing.T, key []byte, old [][]byte, clock *fakeNow) *SeatSigner {
	t.Helper()
	s, err := NewSeatSigner(SeatConfig{Key: key, OldKeys: old, TTL: 30 * time.Second, Skew: time.Second, Now: clock.now})
	require.NoError(t, err)
	return s
}

func TestSeatRoundTrip(t *testing.T) {
	clock := &fakeNow{t: time.UnixMilli(1_700_000_000_123)}
	s := newSigner(t, seatKey, nil, clock)
	tok, err := s.Sign("arena/7", "player-ü")
	require.NoError(t, err)
	require.NotContains(t, tok, "=", "URL-safe, unpadded")
	require.Equal(t, -1, strings.IndexAny(tok, "+/ "), "safe in a URL query")
	seat, err := s.Verify(tok)
	require.NoError(t, err)
	require.Equal(t, "arena/7", seat.Room)
	require.Equal(t, "player-ü", seat.Player)
	require.True(t, seat.Expires.Equal(clock.t.Add(30*time.Second)), "expires %v", seat.Expires)

	// Every node with the key verifies it; a node with another key refuses it.
	peer := newSigner(t, seatKey, nil, clock)
	_, err = peer.Verify(tok)
	require.NoError(t, err)
	_, err = newSigner(t, otherKey, nil, clock).Verify(tok)
	require.ErrorIs(t, err, ErrSeatSignature)
	require.ErrorContains(t, err, `"arena/7"`, "the error names the room")
}

func TestSeatExpiry(t *testing.T) {
	clock := &fakeNow{t: time.UnixMilli(1_700_000_000_000)}
	s := newSigner(t, seatKey, nil, clock)
	tok, err := s.Sign("r", "p")
	require.NoError(t, err)
	clock.t = clock.t.Add(30*time.Second + 999*time.Millisecond) // within the skew
	_, err = s.Verify(tok)
	require.NoError(t, err)
	clock.t = clock.t.Add(time.Millisecond) // expiry + skew
	_, err = s.Verify(tok)
	require.ErrorIs(t, err, ErrSeatExpired)
	require.ErrorContains(t, err, "ago")
}

func TestSeatKeyRotation(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	oldTok, err := newSigner(t, otherKey, nil, clock).Sign("r", "p")
	require.NoError(t, err)
	rotated := newSigner(t, seatKey, [][]byte{otherKey}, clock)
	_, err = rotated.Verify(oldTok)
	require.NoError(t, err, "a token signed with an old key still verifies")
	newTok, err := rotated.Sign("r", "p")
	require.NoError(t, err)
	_, err = newSigner(t, seatKey, nil, clock).Verify(newTok)
	require.NoError(t, err, "new tokens are signed with the new key")
}

func TestSeatTampering(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	s := newSigner(t, seatKey, nil, clock)
	tok, err := s.Sign("room", "alice")
	require.NoError(t, err)
	p64, s64, _ := strings.Cut(tok, ".")
	payload, err := base64.RawURLEncoding.DecodeString(p64)
	require.NoError(t, err)
	// Change the player's name to one of the same length: well formed, badly signed.
	forged := bytes.Replace(payload, []byte("alice"), []byte("mallo"), 1)
	_, err = s.Verify(base64.RawURLEncoding.EncodeToString(forged) + "." + s64)
	require.ErrorIs(t, err, ErrSeatSignature)
	// Push the expiry later.
	forged = bytes.Clone(payload)
	forged[2]++
	_, err = s.Verify(base64.RawURLEncoding.EncodeToString(forged) + "." + s64)
	require.ErrorIs(t, err, ErrSeatSignature)
}

func TestSeatMalformed(t *testing.T) {
	s := newSigner(t, seatKey, nil, &fakeNow{t: time.Unix(1_700_000_000, 0)})
	good, err := s.Sign("room", "p")
	require.NoError(t, err)
	p64, s64, _ := strings.Cut(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(p64)
	enc := base64.RawURLEncoding.EncodeToString
	cases := map[string]string{
		"":                           "no '.'",
		"abc":                        "no '.'",
		p64 + ".b.c":                 "signature",
		p64 + "." + s64[1:]:          "signature",
		p64 + "=." + s64:             "payload",
		p64 + "." + s64 + "A":        "signature of 33 bytes",
		enc(payload[:5]) + "." + s64: "too short",
		enc(append([]byte{2}, payload[1:]...)) + "." + s64: "version 2",
		enc(payload[:len(payload)-1]) + "." + s64:          "player",
		enc(append(bytes.Clone(payload), 0)) + "." + s64:   "after the player",
		strings.Repeat("A", maxSeatTokenLen+1):             "longer than",
	}
	for tok, want := range cases {
		_, err := s.Verify(tok)
		require.ErrorIs(t, err, ErrSeatMalformed, "token %q", tok)
		require.ErrorContains(t, err, want, "token %q", tok)
	}
}

func TestSeatConfigErrors(t *testing.T) {
	_, err := NewSeatSigner(SeatConfig{Key: []byte("short")})
	require.ErrorContains(t, err, "SeatConfig.Key is 5 bytes")
	_, err = NewSeatSigner(SeatConfig{Key: seatKey, OldKeys: [][]byte{nil}})
	require.ErrorContains(t, err, "SeatConfig.OldKeys[0]")
	_, err = NewSeatSigner(SeatConfig{Key: seatKey, TTL: -1})
	require.ErrorContains(t, err, "SeatConfig.TTL")
	s, err := NewSeatSigner(SeatConfig{Key: seatKey})
	require.NoError(t, err)
	_, err = s.Sign("", "p")
	require.ErrorIs(t, err, ErrInvalid)
	_, err = s.Sign("r", "bad\nplayer")
	require.ErrorIs(t, err, ErrInvalid)
	// The signer keeps its own copy of the key.
	key := bytes.Clone(seatKey)
	s, err = NewSeatSigner(SeatConfig{Key: key})
	require.NoError(t, err)
	tok, err := s.Sign("r", "p")
	require.NoError(t, err)
	key[0] ^= 1
	_, err = s.Verify(tok)
	require.NoError(t, err)
}

// FuzzParseSeat feeds arbitrary tokens to the parser and the verifier: neither may panic;
// whatever parses re-signs to a token that verifies to the same seat; no input but a real
// signature verifies.
func FuzzParseSeat(f *testing.F) {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	s, err := NewSeatSigner(SeatConfig{Key: seatKey, Now: clock.now})
	if err != nil {
		f.Fatal(err)
	}
	for _, rp := range [][2]string{{"room", "p"}, {"a/b", "ü"}, {strings.Repeat("r", MaxNameLen), "x"}} {
		tok, err := s.Sign(rp[0], rp[1])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok)
	}
	f.Add("")
	f.Add(".")
	f.Add("AQ.AA")
	f.Fuzz(func(t *testing.T, tok string) {
		seat, payload, sig, err := parseSeat(tok)
		if err != nil {
			require.ErrorIs(t, err, ErrSeatMalformed)
			_, verr := s.Verify(tok)
			require.ErrorIs(t, verr, ErrSeatMalformed)
			return
		}
		require.Len(t, sig, 32)
		require.NoError(t, CheckRoom(seat.Room))
		require.NotEmpty(t, payload)
		got, verr := s.Verify(tok)
		if verr == nil {
			// Only a token the signer made verifies: its fields re-sign to the same payload.
			require.Equal(t, seat, got)
			return
		}
		if !strings.Contains(verr.Error(), "expired") {
			require.ErrorIs(t, verr, ErrSeatSignature)
		}
	})
}
