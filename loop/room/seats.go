package room

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
)

// Seats: a player's place in a room, held across dropped connections and moves, taken back
// with a single-use resume token (docs/client-protocol.md).

const (
	// defaultReconnect is Config.Reconnect when zero: a player whose connection drops keeps
	// their seat this long (the seat tokens' default lifetime too).
	defaultReconnect = 30 * time.Second
	// resumeVersion is the first byte of a resume token's payload.
	resumeVersion = 1
	// resumeContext is prepended to the payload before signing: a MAC made with the same
	// key for another purpose (a handoff's body) never passes for a resume token.
	resumeContext = "baton resume token\x00"
	// maxResumeLen bounds a token's length: longer ones are refused before decoding.
	maxResumeLen = 1024
	// closeReplaced is the close code of a connection whose seat another connection of
	// the same player took (docs/client-protocol.md, 7.).
	closeReplaced = 4002
)

// Seat errors: Admit answers them 401 (the client joins again).
var (
	errResumeToken = errors.New("room: bad resume token")
	errSeatGone    = errors.New("room: no seat held for the player: its hold ran out, or the room ended or was made anew")
	errSpent       = errors.New("room: the resume token was used already (each works once; the latest hello has the current one)")
	// errReplaced is the cancellation cause of a member whose seat a newer connection of
	// the same player took.
	errReplaced = errors.New("room: seat taken by a newer connection of the same player")
)

// seat is a player's place in a room. Loop-confined, but for seq (guarded by core.inMu).
type seat struct {
	player  string
	nonce   uint64     // the resume token names it; a new one at every hello (Play)
	seq     uint64     // the last input sequence number taken or used up; guarded by core.inMu
	task    *loop.Task // the member holding the seat; nil while it is held for a resume
	left    bool       // a leave was reported (OnLeave) and its return is not yet
	resumed bool       // the holder took the seat back (after a drop or a move)
	until   int64      // table clock: the hold ends; meaningful while task is nil
}

// seatEvent is a hook call queued for the tick task.
type seatEvent struct {
	player string
	kind   int // evLeave, evReturn, evRemove
}

const (
	evLeave = iota
	evReturn
	evRemove
)

// seatRecord is a seat as a handoff carries it (the envelope's "seats").
type seatRecord struct {
	Player string `json:"player"`
	Nonce  uint64 `json:"nonce"`
	Seq    uint64 `json:"seq"`
	Left   bool   `json:"left,omitempty"`
	Until  int64  `json:"until_unix_ns"` // the hold's end, wall clock
}

// seatStats are a node's seat figures (the stats section "cluster", "seats"). Safe for
// concurrent use.
type seatStats struct {
	resumed, held, removed, replaced, refused atomic.Int64
}

// seatFigures are seatStats as the stats page shows them.
type seatFigures struct {
	Resumed  int64 `json:"resumed"`
	Held     int64 `json:"held"`
	Removed  int64 `json:"removed"`
	Replaced int64 `json:"replaced"`
	Refused  int64 `json:"refused"`
}

func (s *seatStats) figures() seatFigures {
	return seatFigures{Resumed: s.resumed.Load(), Held: s.held.Load(), Removed: s.removed.Load(),
		Replaced: s.replaced.Load(), Refused: s.refused.Load()}
}

// newNonce returns a random nonce, never 0.
func newNonce() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24+)
		if n := binary.BigEndian.Uint64(b[:]); n != 0 {
			return n
		}
	}
}

// randomKey returns a fresh 32-byte key: the resume key of a node without a HandoffKey.
func randomKey() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// signResume returns the resume token of the seat nonce of player in room. Any goroutine.
func signResume(key []byte, room, player string, nonce uint64) string {
	p := make([]byte, 0, 1+8+2*binary.MaxVarintLen16+len(room)+len(player))
	p = append(p, resumeVersion)
	p = binary.BigEndian.AppendUint64(p, nonce)
	p = binary.AppendUvarint(p, uint64(len(room)))
	p = append(p, room...)
	p = binary.AppendUvarint(p, uint64(len(player)))
	p = append(p, player...)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(p) + "." + enc.EncodeToString(resumeMAC(key, p))
}

func resumeMAC(key, payload []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(resumeContext))
	h.Write(payload)
	return h.Sum(nil)
}

// verifyResume checks token's form and signature and returns what it names. Errors wrap
// errResumeToken. Any goroutine.
func verifyResume(key []byte, token string) (room, player string, nonce uint64, err error) {
	bad := func(why string, args ...any) (string, string, uint64, error) {
		return "", "", 0, fmt.Errorf("%w: %s", errResumeToken, fmt.Sprintf(why, args...))
	}
	if len(token) > maxResumeLen {
		return bad("%d bytes, longer than %d", len(token), maxResumeLen)
	}
	p64, s64, ok := strings.Cut(token, ".")
	if !ok {
		return bad("no '.' between payload and signature")
	}
	enc := base64.RawURLEncoding.Strict()
	p, err1 := enc.DecodeString(p64)
	sig, err2 := enc.DecodeString(s64)
	if err1 != nil || err2 != nil || len(sig) != sha256.Size {
		return bad("not base64url, or a signature of the wrong size")
	}
	if !hmac.Equal(sig, resumeMAC(key, p)) {
		return bad("signature does not match")
	}
	if len(p) < 1+8 || p[0] != resumeVersion {
		return bad("payload too short or of another version")
	}
	nonce = binary.BigEndian.Uint64(p[1:9])
	rest := p[9:]
	field := func() (string, bool) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return "", false
		}
		v := string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
		return v, true
	}
	var ok1, ok2 bool
	room, ok1 = field()
	player, ok2 = field()
	if !ok1 || !ok2 || len(rest) != 0 || directory.CheckRoom(room) != nil || player == "" {
		return bad("malformed payload")
	}
	return room, player, nonce, nil
}

// sit gives player's seat to task t (attaching t as a member): a new seat, or the seat held
// for the player (after a drop or a move), or a live seat whose connection is replaced.
// With resume, only a held seat whose nonce is nonce (the resume token's) is taken. It
// returns the seat. Loop-confined.
func (c *core) sit(t *loop.Task, player string, resume bool, nonce uint64) (*seat, error) {
	s := c.seats[player]
	if resume {
		switch {
		case s == nil:
			return nil, errSeatGone
		case s.nonce != nonce:
			return nil, errSpent
		}
	}
	c.sameLoop("Admit", t)
	if err := c.join(t); err != nil {
		return nil, err
	}
	nf := &c.tbl.node.sts
	if s == nil {
		s = &seat{player: player}
		if c.seats == nil {
			c.seats = map[string]*seat{}
		}
		c.seats[player] = s
	}
	prev := s.task
	s.resumed = s.nonce != 0 // the seat existed: held, or live on another connection
	if s.nonce == 0 {
		s.nonce = newNonce()
	}
	// The nonce (so the resume token) stays until Play's hello gives the player the next:
	// an upgrade refused after this (a saturated loop's 503) must not spend the token of a
	// player who never heard of another.
	s.task, s.until = t, 0
	for i := range c.members {
		if c.members[i].t == t {
			c.members[i].seat = s
		} else if c.members[i].seat == s {
			c.members[i].seat = nil
		}
	}
	if s.resumed {
		nf.resumed.Add(1)
	}
	if prev != nil && prev != t {
		nf.replaced.Add(1)
		prev.Cancel(errReplaced)
	}
	if s.left {
		s.left = false
		c.seatEv = append(c.seatEv, seatEvent{player, evReturn})
	}
	return s, nil
}

// join makes t, a task of the room's loop, a member of the room for Attach and Admit:
// moved from the room it is in, if any. Loop-confined.
func (c *core) join(t *loop.Task) error {
	if c.stopping || c.ended {
		return ErrRoomStopped
	}
	if prev := c.tbl.owner[t]; prev == c {
		return nil
	} else if prev != nil {
		prev.detach(t)
	}
	return c.attach(t)
}

// seatDropped is called when member m leaves the room: its seat, if it still holds one, is
// held for a resume (the leave queued for OnLeave), or removed at once with a negative
// Reconnect. Nothing happens in a room that is stopping (moved, stopped). Loop-confined.
func (c *core) seatDropped(m *member) {
	s := m.seat
	if s == nil || s.task != m.t || c.stopping || c.ended {
		return
	}
	s.task = nil
	s.left = true
	c.seatEv = append(c.seatEv, seatEvent{s.player, evLeave})
	if c.hold < 0 {
		delete(c.seats, s.player)
		c.seatEv = append(c.seatEv, seatEvent{s.player, evRemove})
		c.tbl.node.sts.removed.Add(1)
		return
	}
	c.tbl.node.sts.held.Add(1)
	s.until = c.tbl.now() + int64(c.hold)
}

// seatTurn runs between two ticks on the tick task: seats whose hold ran out are removed,
// then the queued hooks run, in order, contained. The tick task's own.
func (c *core) seatTurn(bt *loop.Task, now int64) {
	for p, s := range c.seats {
		if s.task == nil && now >= s.until {
			delete(c.seats, p)
			c.seatEv = append(c.seatEv, seatEvent{p, evRemove})
			c.tbl.node.sts.removed.Add(1)
		}
	}
	for len(c.seatEv) > 0 {
		ev := c.seatEv[0]
		c.seatEv = c.seatEv[1:]
		if fn := c.seatHooks[ev.kind]; fn != nil && bt.Contain(func() { fn(ev.player) }) {
			c.rec.Panicked()
		}
	}
	c.seatEv = nil
}

// seatRecords returns the seats as a handoff carries them, frozen at wall time frozen
// (Unix ns): a seat whose player is connected is held from the freeze (the move closes
// the connection). Loop-confined, after the freeze.
func (c *core) seatRecords(frozen int64) []seatRecord {
	if len(c.seats) == 0 {
		return nil
	}
	now := c.tbl.now()
	hold := max(int64(c.hold), 0)
	out := make([]seatRecord, 0, len(c.seats))
	c.inMu.Lock()
	for _, s := range c.seats {
		r := seatRecord{Player: s.player, Nonce: s.nonce, Seq: s.seq, Left: s.left, Until: frozen + hold}
		if s.task == nil {
			r.Until = frozen + (s.until - now)
		}
		out = append(out, r)
	}
	c.inMu.Unlock()
	return out
}

// restoreSeats sets the seats of a room restored from a handoff: all held, until their
// hold's end (wall clock, converted to the table's clock). Loop-confined, before launch.
func (c *core) restoreSeats(recs []seatRecord) {
	if len(recs) == 0 {
		return
	}
	c.seats = make(map[string]*seat, len(recs))
	now, wall := c.tbl.now(), time.Now().UnixNano()
	for _, r := range recs {
		c.seats[r.Player] = &seat{player: r.Player, nonce: r.Nonce, seq: r.Seq, left: r.Left, until: now + (r.Until - wall)}
	}
}

// inputSeq offers input seq of seat s (docs/client-protocol.md, 4.): taken if it is the
// seat's next, a duplicate if already taken, refused as out of order if further ahead.
// bad is the input's decoding error: the next number is then used up without queuing v.
// It returns the seat's last taken number and nil (taken, or a duplicate), a retryable
// error (ErrHandingOff, ErrInputFull, errOutOfOrder), or a final one (ErrInputDropped,
// bad, ErrRoomStopped, ErrMoved). Any goroutine.
func (r *Room[I]) inputSeq(s *seat, seq uint64, v I, bad error) (uint64, error) {
	c := &r.core
	c.inMu.Lock()
	defer c.inMu.Unlock()
	switch {
	case c.ho.frozen != 0:
		return s.seq, c.ho.refusal()
	case c.closed:
		return s.seq, ErrRoomStopped
	case seq <= s.seq:
		return s.seq, nil
	case seq != s.seq+1:
		return s.seq, errOutOfOrder
	case bad != nil:
		s.seq = seq
		return s.seq, bad
	case len(r.in) >= c.inputCap:
		if c.refuse {
			c.refused++
			return s.seq, ErrInputFull
		}
		c.dropped++
		s.seq = seq
		return s.seq, ErrInputDropped
	}
	r.in = append(r.in, v)
	c.inputs++
	c.queueLen = len(r.in)
	s.seq = seq
	return s.seq, nil
}

// errOutOfOrder answers an input further ahead than the seat's next number.
var errOutOfOrder = errors.New("room: input out of order: resend from the one after ack")
