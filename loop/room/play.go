package room

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/batonrt/baton/directory"
	"github.com/batonrt/baton/loop"
)

// Play serves a seated player's connection by the client protocol
// (docs/client-protocol.md) until it ends, and returns why. c's task holds a seat in r
// (Admit seated it) and conn is its upgraded WebSocket (*ws.Conn of package loop/ws has
// these methods). Play sends the hello {"type":"joined", "room", "node", "token",
// "player", "resume", "ack", "resumed"}, makes the task a member that receives r's
// broadcasts (AttachConn), then reads the player's messages: each
// {"type":"input","seq":N,"input":...} is decoded by decode (which stamps the player on
// the input: the client does not say who it is) and offered to the room in sequence
// order, at most once, and answered "ack", "retry" (the room is freezing to move, its
// queue is full, or the input came out of order) or "refused" (decode failed, or the
// queue dropped it). When the room moves Play closes the connection with CloseMoved
// and the JSON reason {"room", "node", "addr"} naming the new owner; when the room
// stopped, with 1000; when a newer connection took the seat, with 4002. A connection that
// just ends leaves the seat held for Config.Reconnect. Other messages get an "error"
// answer; a binary or non-JSON message closes the connection (1008). The handler's task
// only (loop mode).
func Play[I any](c *loop.Ctx, r *Room[I], conn interface {
	ReadMessage() (binary bool, data []byte, err error)
	WriteText(p []byte) error
	Close(code uint16, reason string) error
}, decode func(player string, input json.RawMessage) (I, error)) error {
	rc := &r.core
	rc.confined("Play")
	var s *seat
	for i := range rc.members {
		if rc.members[i].t == &c.Task {
			s = rc.members[i].seat
		}
	}
	if s == nil || s.task != &c.Task {
		if errors.Is(c.Err(), errReplaced) {
			_ = conn.Close(closeReplaced, "replaced by a newer connection")
			return errReplaced
		}
		return fmt.Errorf("room: Play in room %q: the task holds no seat (Admit seats a player named by a seat or resume token)", rc.name)
	}
	rc.inMu.Lock()
	ack := s.seq
	rc.inMu.Unlock()
	s.nonce = newNonce() // the token the player held is spent: the hello carries the next
	hello, _ := json.Marshal(playHello{Type: "joined", Room: rc.name, Node: rc.tbl.node.cfg.Node, Token: r.Token(),
		Player: s.player, Resume: signResume(rc.tbl.node.rkey, rc.name, s.player, s.nonce), Ack: ack, Resumed: s.resumed})
	if err := conn.WriteText(hello); err != nil {
		return err
	}
	// Nothing ran on the loop since the hello was queued: it is the first message, before
	// any broadcast.
	if err := r.AttachConn(&c.Task, conn); err != nil {
		return playClose(c, r, conn, err)
	}
	retryMs := max(time.Duration(rc.period).Milliseconds(), 1)
	var buf []byte
	for {
		bin, data, err := conn.ReadMessage()
		if err != nil {
			return playClose(c, r, conn, err)
		}
		var m playMsg
		if bin || json.Unmarshal(data, &m) != nil {
			buf = append(buf[:0], `{"type":"error","error":"messages are JSON text (docs/client-protocol.md)"}`...)
			_ = conn.WriteText(buf)
			_ = conn.Close(1008, "messages are JSON text")
			return errors.New("room: Play: the client sent a message that is not JSON text")
		}
		if m.Type != "input" || m.Seq == 0 {
			buf = append(buf[:0], `{"type":"error","error":`...)
			buf = strconv.AppendQuote(buf, "unknown message type "+strconv.Quote(m.Type)+", or an input without a seq (from 1)")
			buf = append(buf, '}')
			if conn.WriteText(buf) != nil {
				return playClose(c, r, conn, c.Err())
			}
			continue
		}
		v, bad := decode(s.player, m.Input)
		if bad != nil {
			bad = fmt.Errorf("the input does not decode: %w", bad)
		}
		last, err := r.inputSeq(s, m.Seq, v, bad)
		buf = buf[:0]
		switch {
		case err == nil:
			buf = append(buf, `{"type":"ack","seq":`...)
			buf = strconv.AppendUint(buf, last, 10)
			buf = append(buf, '}')
		case errors.Is(err, ErrHandingOff), errors.Is(err, ErrInputFull), errors.Is(err, errOutOfOrder):
			after := retryMs
			if errors.Is(err, errOutOfOrder) {
				after = 0
			}
			buf = append(buf, `{"type":"retry","seq":`...)
			buf = strconv.AppendUint(buf, m.Seq, 10)
			buf = append(buf, `,"ack":`...)
			buf = strconv.AppendUint(buf, last, 10)
			buf = append(buf, `,"after_ms":`...)
			buf = strconv.AppendInt(buf, after, 10)
			buf = append(buf, `,"error":`...)
			buf = strconv.AppendQuote(buf, err.Error())
			buf = append(buf, '}')
		case errors.Is(err, ErrInputDropped), errors.Is(err, bad):
			buf = append(buf, `{"type":"refused","seq":`...)
			buf = strconv.AppendUint(buf, m.Seq, 10)
			buf = append(buf, `,"error":`...)
			buf = strconv.AppendQuote(buf, err.Error())
			buf = append(buf, '}')
		default: // moved or stopped: no answer; the client resends after its resume
			continue
		}
		if conn.WriteText(buf) != nil {
			return playClose(c, r, conn, c.Err())
		}
	}
}

// playHello is Play's first message.
type playHello struct {
	Type    string          `json:"type"`
	Room    string          `json:"room"`
	Node    string          `json:"node"`
	Token   directory.Token `json:"token"`
	Player  string          `json:"player"`
	Resume  string          `json:"resume"`
	Ack     uint64          `json:"ack"`
	Resumed bool            `json:"resumed"`
}

// playMsg is a client's message as Play reads it.
type playMsg struct {
	Type  string          `json:"type"`
	Seq   uint64          `json:"seq"`
	Input json.RawMessage `json:"input"`
}

// playClose closes conn as the protocol says for why the connection's task ended, and
// returns err. The handler's task.
func playClose[I any](c *loop.Ctx, r *Room[I], conn interface {
	Close(code uint16, reason string) error
}, err error) error {
	cause := c.Err()
	switch {
	case errors.Is(cause, ErrMoved):
		_ = conn.Close(CloseMoved, movedReason(&r.core)) // the task is cancelled: this does not wait
	case errors.Is(cause, errReplaced):
		_ = conn.Close(closeReplaced, "replaced by a newer connection")
	case errors.Is(cause, ErrRoomStopped):
		_ = conn.Close(1000, "room ended")
	}
	if cause != nil {
		return cause
	}
	return err
}

// movedReason is the close reason of a moved room's members: {"room","node","addr"}
// naming the new owner, without them when it is not known (the ownership lapsed) or the
// reason would pass the 123 bytes a close reason holds. Loop-confined.
func movedReason(c *core) string {
	type reason struct {
		Room string `json:"room"`
		Node string `json:"node,omitempty"`
		Addr string `json:"addr,omitempty"`
	}
	b, _ := json.Marshal(reason{Room: c.name, Node: c.ho.dest.ID, Addr: c.ho.dest.PublicAddr})
	if len(b) > 123 {
		if b, _ = json.Marshal(reason{Room: c.name}); len(b) > 123 {
			return ""
		}
	}
	return string(b)
}
