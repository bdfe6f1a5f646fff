package httpcodec

import (
	"encoding/binary"
	"unicode/utf8"
)

// WSMessage is what WSReader.Next delivers: a whole data message or one
// control frame.
type WSMessage struct {
	// Opcode is WSText, WSBinary, WSClose, WSPing or WSPong.
	Opcode WSOpcode

	// Payload is the message: the unmasked payload of its frames,
	// concatenated. It is a view into the buffer passed to Next (for a
	// message of one frame, and for control frames) or into the reader's
	// own buffer (for a fragmented message); it is valid until the next
	// call to Next and only while those buffer bytes are neither discarded
	// nor reused. Text payloads are valid UTF-8.
	Payload []byte

	// CloseCode is, for WSClose, the code the peer sent, or
	// WSCloseNoStatus (1005) when its close frame had no payload. It is
	// zero for other opcodes.
	CloseCode uint16

	// CloseReason is, for WSClose, the UTF-8 reason after the code (a view
	// into Payload, possibly empty). It is nil for other opcodes.
	CloseReason []byte
}

// wsKeepBufBytes is the largest reassembly buffer a WSReader keeps between
// fragmented messages; a larger one, grown by one big message, is let go
// once that message is delivered, so that a burst does not pin memory on
// every connection.
const wsKeepBufBytes = 64 << 10

// WSReader reads client messages from a connection's bytes: it parses
// frames (as ParseWSFrame does), reassembles fragmented messages, lets
// control frames through between fragments, enforces
// Config.MaxWSFrameBytes and Config.MaxWSMessageBytes (1009), checks that
// text messages are UTF-8 incrementally across fragments, so a code point
// may be split between frames (1007), and parses close frames (RFC 6455
// §5.5.1, §7.4: a 1-byte payload or a code ValidWSCloseCode refuses is
// 1002, a reason that is not UTF-8 is 1007). After a close frame every
// further frame is 1002.
//
// The zero value is ready to use with the default limits; call Init for
// others. A WSReader belongs to one connection and must be used from one
// goroutine at a time. It allocates only to reassemble fragmented
// messages, into a buffer it keeps (up to 64 KiB) for the next ones.
type WSReader struct {
	maxFrame, maxMsg int64
	inited           bool
	closed           bool

	op   WSOpcode // opcode of the fragmented message in progress, 0 if none
	size int64    // payload bytes of that message so far
	buf  []byte   // its fragments, when not delivered from the input
	utf8 wsUTF8   // UTF-8 state of a text message in progress
}

// Init sets the limits (Config.MaxWSFrameBytes and
// Config.MaxWSMessageBytes; zero fields take their defaults) and forgets
// any message in progress.
func (r *WSReader) Init(cfg Config) {
	c := cfg.normalized()
	r.maxFrame, r.maxMsg = c.MaxWSFrameBytes, c.MaxWSMessageBytes
	r.inited = true
	r.Reset()
}

// Reset forgets any message in progress and a close frame received, for
// reuse on another connection. It keeps the limits and the buffer.
func (r *WSReader) Reset() {
	r.closed = false
	r.op, r.size, r.buf, r.utf8 = 0, 0, r.buf[:0], wsUTF8{}
}

// Next consumes at most one frame from the start of buf.
//
// It returns the number of bytes consumed, and ok when the frame made m
// whole: a data message (its last fragment), or a control frame (ping,
// pong, close). After a frame that only continues a message, n > 0 and ok
// is false. While the frame at buf's start is incomplete it returns
// ErrNeedMore with n == 0 and leaves buf untouched: call it again with the
// same bytes and more. On a protocol failure it returns a *WSError whose
// Code is the close code to send before closing; the reader is then
// unusable until Reset.
//
// Discard the n consumed bytes after using m: m.Payload may point into
// them. Results do not depend on how the bytes were split across calls.
//
//	for {
//		n, ok, err := r.Next(buf, &m)
//		if err == httpcodec.ErrNeedMore { break } // read more
//		if err != nil { /* send close err.(*httpcodec.WSError).Code, then close */ }
//		if ok { handle(&m) }
//		buf = buf[n:]
//	}
func (r *WSReader) Next(buf []byte, m *WSMessage) (n int, ok bool, err error) {
	if !r.inited {
		r.Init(Config{})
	}
	if len(buf) == 0 {
		return 0, false, ErrNeedMore
	}
	if r.closed {
		return 0, false, errWSFrameAfterClose
	}
	seq := wsSeqNone
	if r.op != 0 {
		seq = wsSeqInMsg
	}
	var h wsHeader
	if e := parseWSHeader(buf, r.maxFrame, r.maxMsg-r.size, seq, &h); e != nil {
		if e == wsNeedMore {
			return 0, false, ErrNeedMore
		}
		return 0, false, e
	}
	if int64(len(buf)-h.hlen) < h.plen {
		return 0, false, ErrNeedMore
	}
	end := h.hlen + int(h.plen)
	p := buf[h.hlen:end:end]
	maskWS(p, h.key)

	switch h.op {
	case WSPing, WSPong:
		*m = WSMessage{Opcode: h.op, Payload: p}
		return end, true, nil
	case WSClose:
		code, reason, e := parseWSClose(p)
		if e != nil {
			return 0, false, e
		}
		r.closed = true
		*m = WSMessage{Opcode: WSClose, Payload: p, CloseCode: code, CloseReason: reason}
		return end, true, nil
	case WSText, WSBinary:
		if h.fin {
			// A message in one frame: delivered from the input, no copy.
			if h.op == WSText && !utf8.Valid(p) {
				return 0, false, errWSTextUTF8
			}
			*m = WSMessage{Opcode: h.op, Payload: p}
			return end, true, nil
		}
		r.op, r.size, r.utf8 = h.op, 0, wsUTF8{}
		r.buf = r.buf[:0]
	}
	// A fragment of a message in progress.
	if r.op == WSText && !r.utf8.feed(p, h.fin) {
		return 0, false, errWSTextUTF8
	}
	r.size += int64(len(p))
	r.buf = append(r.buf, p...)
	if !h.fin {
		return end, false, nil
	}
	*m = WSMessage{Opcode: r.op, Payload: r.buf}
	r.op, r.size = 0, 0
	if cap(r.buf) > wsKeepBufBytes {
		r.buf = nil // m.Payload keeps it alive as long as the caller needs it
	}
	return end, true, nil
}

// parseWSClose parses a close frame's payload: empty (no status, reported
// as 1005), or a 2-byte code and a UTF-8 reason.
func parseWSClose(p []byte) (uint16, []byte, *WSError) {
	switch len(p) {
	case 0:
		return WSCloseNoStatus, p[:0:0], nil
	case 1:
		return 0, nil, errWSCloseLength1
	}
	code := binary.BigEndian.Uint16(p)
	if !ValidWSCloseCode(code) {
		return 0, nil, errWSCloseCode
	}
	if !utf8.Valid(p[2:]) {
		return 0, nil, errWSCloseReasonUTF8
	}
	return code, p[2:], nil
}

// wsUTF8 is the state of an incremental UTF-8 check: the number of
// continuation bytes the current code point still needs, and the range
// the next one must fall in (RFC 3629 §4 restricts the second byte after
// E0, ED, F0 and F4).
type wsUTF8 struct {
	need   uint8
	lo, hi byte
}

// feed checks the next piece of a text message; last says whether it is
// the end of the message. It reports false as soon as the bytes so far
// cannot start valid UTF-8, or at the end if a code point is left
// unfinished.
func (s *wsUTF8) feed(b []byte, last bool) bool {
	i := 0
	// Finish a code point begun in an earlier piece.
	for s.need > 0 && i < len(b) {
		if c := b[i]; c < s.lo || c > s.hi {
			return false
		}
		s.need--
		s.lo, s.hi = 0x80, 0xbf
		i++
	}
	if i == len(b) {
		return !last || s.need == 0
	}
	// The bulk with the standard library; only a code point cut at the end
	// goes through the state machine.
	tail := len(b)
	for k := len(b) - 1; k >= i && k >= len(b)-3; k-- {
		if c := b[k]; c >= 0xc0 {
			if !utf8.FullRune(b[k:]) {
				tail = k
			}
			break
		} else if c < 0x80 {
			break
		}
	}
	if !utf8.Valid(b[i:tail]) {
		return false
	}
	for _, c := range b[tail:] {
		if s.need == 0 {
			switch {
			case c >= 0xc2 && c <= 0xdf:
				s.need, s.lo, s.hi = 1, 0x80, 0xbf
			case c == 0xe0:
				s.need, s.lo, s.hi = 2, 0xa0, 0xbf
			case c >= 0xe1 && c <= 0xec, c == 0xee, c == 0xef:
				s.need, s.lo, s.hi = 2, 0x80, 0xbf
			case c == 0xed:
				s.need, s.lo, s.hi = 2, 0x80, 0x9f
			case c == 0xf0:
				s.need, s.lo, s.hi = 3, 0x90, 0xbf
			case c >= 0xf1 && c <= 0xf3:
				s.need, s.lo, s.hi = 3, 0x80, 0xbf
			case c == 0xf4:
				s.need, s.lo, s.hi = 3, 0x80, 0x8f
			default:
				return false
			}
			continue
		}
		if c < s.lo || c > s.hi {
			return false
		}
		s.need--
		s.lo, s.hi = 0x80, 0xbf
	}
	return !last || s.need == 0
}
