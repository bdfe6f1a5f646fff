package httpcodec

import (
	"encoding/binary"
	"errors"
	"strconv"
	"unicode/utf8"
)

// WSOpcode is a WebSocket frame opcode (RFC 6455 §5.2).
type WSOpcode byte

// The opcodes RFC 6455 defines; every other value is refused with 1002.
const (
	WSContinuation WSOpcode = 0x0
	WSText         WSOpcode = 0x1
	WSBinary       WSOpcode = 0x2
	WSClose        WSOpcode = 0x8
	WSPing         WSOpcode = 0x9
	WSPong         WSOpcode = 0xA
)

// IsControl reports whether op is a control opcode (close, ping, pong, or
// a reserved 0xB-0xF).
func (op WSOpcode) IsControl() bool { return op&0x8 != 0 }

// String returns the opcode's name ("text", "close", ...) or its number.
func (op WSOpcode) String() string {
	switch op {
	case WSContinuation:
		return "continuation"
	case WSText:
		return "text"
	case WSBinary:
		return "binary"
	case WSClose:
		return "close"
	case WSPing:
		return "ping"
	case WSPong:
		return "pong"
	}
	return "opcode " + strconv.Itoa(int(op))
}

// WebSocket close status codes (RFC 6455 §7.4.1 and the IANA registry).
const (
	WSCloseNormal             uint16 = 1000
	WSCloseGoingAway          uint16 = 1001
	WSCloseProtocolError      uint16 = 1002
	WSCloseUnsupportedData    uint16 = 1003
	WSCloseNoStatus           uint16 = 1005 // never sent: reported for a close frame without a code
	WSCloseAbnormal           uint16 = 1006 // never sent: the connection dropped without a close frame
	WSCloseInvalidPayload     uint16 = 1007
	WSClosePolicyViolation    uint16 = 1008
	WSCloseMessageTooBig      uint16 = 1009
	WSCloseMandatoryExtension uint16 = 1010
	WSCloseInternalError      uint16 = 1011
	WSCloseServiceRestart     uint16 = 1012
	WSCloseTryAgainLater      uint16 = 1013
	WSCloseBadGateway         uint16 = 1014
	WSCloseTLSHandshake       uint16 = 1015 // never sent
)

// WSMaxControlPayload is the largest payload of a control frame (RFC 6455
// §5.5); a close frame's reason can therefore be at most 123 bytes.
const WSMaxControlPayload = 125

// ValidWSCloseCode reports whether code may appear in a close frame: 1000-
// 1003, 1007-1014 and the 3000-4999 range for libraries and applications.
// 1004 (reserved), 1005, 1006 and 1015 (reserved for reporting), codes
// below 1000, 1016-2999 (unassigned) and 5000 and up are not. This is the
// rule both for close frames received and for AppendWSClose.
func ValidWSCloseCode(code uint16) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// WSError is a WebSocket protocol failure: Code is the close code to send
// in the close frame before closing the connection (1002 protocol error,
// 1007 invalid payload data, 1009 message too big), Reason says what was
// wrong (it fits in a close frame). The parser returns shared *WSError
// values; do not modify them.
type WSError struct {
	Code   uint16
	Reason string
}

// Error returns "httpcodec: websocket <code> <reason>".
func (e *WSError) Error() string {
	return "httpcodec: websocket " + strconv.Itoa(int(e.Code)) + " " + e.Reason
}

func newWSErr(code uint16, reason string) *WSError { return &WSError{Code: code, Reason: reason} }

// Errors of the frame parser and the message reader, preallocated so that
// failing costs no allocation.
var (
	errWSRSV             = newWSErr(WSCloseProtocolError, "reserved bits set")
	errWSOpcode          = newWSErr(WSCloseProtocolError, "unknown opcode")
	errWSControlFragment = newWSErr(WSCloseProtocolError, "fragmented control frame")
	errWSControlLong     = newWSErr(WSCloseProtocolError, "control frame payload over 125 bytes")
	errWSUnmasked        = newWSErr(WSCloseProtocolError, "unmasked client frame")
	errWSNonMinimal      = newWSErr(WSCloseProtocolError, "payload length not minimally encoded")
	errWSLength63        = newWSErr(WSCloseProtocolError, "payload length has the most significant bit set")
	errWSFrameTooBig     = newWSErr(WSCloseMessageTooBig, "frame too big")
	errWSMessageTooBig   = newWSErr(WSCloseMessageTooBig, "message too big")
	errWSContinuation    = newWSErr(WSCloseProtocolError, "continuation frame without a message to continue")
	errWSInterleaved     = newWSErr(WSCloseProtocolError, "new data frame before the last message finished")
	errWSCloseLength1    = newWSErr(WSCloseProtocolError, "close frame payload of 1 byte")
	errWSCloseCode       = newWSErr(WSCloseProtocolError, "invalid close code")
	errWSCloseReasonUTF8 = newWSErr(WSCloseInvalidPayload, "close reason not valid UTF-8")
	errWSTextUTF8        = newWSErr(WSCloseInvalidPayload, "text message not valid UTF-8")
	errWSFrameAfterClose = newWSErr(WSCloseProtocolError, "frame after close")
	wsNeedMore           = &WSError{}
)

// ErrWSInvalidFrame is returned by the frame writers for a frame they must
// not write: an unknown opcode, a control frame that is fragmented or
// whose payload is over 125 bytes, a close code ValidWSCloseCode refuses,
// or a close reason that is not UTF-8.
var ErrWSInvalidFrame = errors.New("httpcodec: invalid WebSocket frame to write")

// WSFrame is one parsed frame.
type WSFrame struct {
	// Fin is set on the last frame of a message (and on every control
	// frame).
	Fin bool

	// Opcode is the frame's opcode; WSContinuation for the second and
	// later frames of a fragmented message.
	Opcode WSOpcode

	// Payload is the unmasked payload: a view into the buffer passed to
	// ParseWSFrame, which unmasks it in place.
	Payload []byte
}

// wsHeader is a parsed frame header.
type wsHeader struct {
	fin    bool
	op     WSOpcode
	hlen   int    // header length, mask key included
	plen   int64  // payload length
	key    uint32 // masking key, bytes in wire order packed little-endian
	masked bool
}

// Message sequence states for parseWSHeader.
const (
	wsSeqAny = iota
	wsSeqNone
	wsSeqInMsg
)

// parseWSHeader parses the header of a client frame at the start of buf.
// Each rule is checked as soon as the bytes it depends on have arrived,
// in byte order, so the result does not depend on how buf was split. A
// data frame whose payload length is over maxFrame (1009, frame too big)
// or over maxMsg (1009, message too big) is refused as soon as the length
// is known, before the payload is waited for; control frames are bounded
// by 125 bytes only. seq is the message sequence state of a WSReader
// (wsSeqNone: no fragmented message in progress, so a continuation is an
// error; wsSeqInMsg: one is, so a text or binary frame is an error) or
// wsSeqAny to skip those rules; they are checked on the first byte.
func parseWSHeader(buf []byte, maxFrame, maxMsg int64, seq int, h *wsHeader) *WSError {
	if len(buf) < 1 {
		return wsNeedMore
	}
	b0 := buf[0]
	if b0&0x70 != 0 {
		return errWSRSV
	}
	h.fin = b0&0x80 != 0
	h.op = WSOpcode(b0 & 0x0f)
	switch h.op {
	case WSContinuation, WSText, WSBinary, WSClose, WSPing, WSPong:
	default:
		return errWSOpcode
	}
	if h.op.IsControl() && !h.fin {
		return errWSControlFragment
	}
	switch {
	case seq == wsSeqNone && h.op == WSContinuation:
		return errWSContinuation
	case seq == wsSeqInMsg && (h.op == WSText || h.op == WSBinary):
		return errWSInterleaved
	}
	if len(buf) < 2 {
		return wsNeedMore
	}
	b1 := buf[1]
	h.masked = b1&0x80 != 0
	if !h.masked {
		return errWSUnmasked
	}
	n := int64(b1 & 0x7f)
	hl := 2
	if h.op.IsControl() && n > WSMaxControlPayload {
		return errWSControlLong
	}
	switch n {
	case 126:
		if len(buf) < 4 {
			return wsNeedMore
		}
		n = int64(binary.BigEndian.Uint16(buf[2:]))
		if n < 126 {
			return errWSNonMinimal
		}
		hl = 4
	case 127:
		if len(buf) < 3 {
			return wsNeedMore
		}
		if buf[2]&0x80 != 0 {
			return errWSLength63
		}
		if len(buf) < 10 {
			return wsNeedMore
		}
		n = int64(binary.BigEndian.Uint64(buf[2:]))
		if n <= 0xffff {
			return errWSNonMinimal
		}
		hl = 10
	}
	if !h.op.IsControl() {
		if n > maxFrame {
			return errWSFrameTooBig
		}
		if n > maxMsg {
			return errWSMessageTooBig
		}
	}
	h.plen = n
	if len(buf) < hl+4 {
		return wsNeedMore
	}
	h.key = binary.LittleEndian.Uint32(buf[hl:])
	h.hlen = hl + 4
	return nil
}

// ParseWSFrame parses one client frame at the start of buf and unmasks its
// payload in place.
//
// It is incremental over a growing buffer without keeping state: while the
// frame is incomplete it returns ErrNeedMore and leaves buf untouched, so
// call it again with the same bytes and more. A data frame whose payload
// is longer than maxPayload is refused with 1009 as soon as its length has
// arrived, so the caller never buffers more than 14 + max(maxPayload, 125)
// bytes for one frame (control frames carry at most 125). On success it fills f (f.Payload is a view into buf) and
// returns the frame's length; the next frame starts at buf[n:]. On failure
// it returns a *WSError carrying the close code.
//
// It checks every rule of RFC 6455 §5 that one frame can break: reserved
// bits set (no extension is ever negotiated) or an unknown opcode (1002),
// a control frame fragmented or over 125 bytes (1002), a client frame
// without a mask (1002), an extended length not minimally encoded or with
// the top bit set (1002). Rules across frames (continuations, UTF-8, close
// payloads) are WSReader's. Errors do not depend on how the bytes were
// split across calls. It may be called from any goroutine; buf belongs to
// the caller.
func ParseWSFrame(buf []byte, maxPayload int64, f *WSFrame) (n int, err error) {
	var h wsHeader
	if e := parseWSHeader(buf, maxPayload, maxPayload, wsSeqAny, &h); e != nil {
		if e == wsNeedMore {
			return 0, ErrNeedMore
		}
		return 0, e
	}
	if int64(len(buf)-h.hlen) < h.plen {
		return 0, ErrNeedMore
	}
	end := h.hlen + int(h.plen)
	p := buf[h.hlen:end:end]
	maskWS(p, h.key)
	f.Fin, f.Opcode, f.Payload = h.fin, h.op, p
	return end, nil
}

// maskWS XORs b with the masking key (wire-order bytes packed
// little-endian), starting at key byte 0: the masking and unmasking of RFC
// 6455 §5.3. It works a word at a time.
func maskWS(b []byte, key uint32) {
	k := uint64(key) | uint64(key)<<32
	i := 0
	for ; i+32 <= len(b); i += 32 {
		s := b[i : i+32 : i+32]
		binary.LittleEndian.PutUint64(s[0:], binary.LittleEndian.Uint64(s[0:])^k)
		binary.LittleEndian.PutUint64(s[8:], binary.LittleEndian.Uint64(s[8:])^k)
		binary.LittleEndian.PutUint64(s[16:], binary.LittleEndian.Uint64(s[16:])^k)
		binary.LittleEndian.PutUint64(s[24:], binary.LittleEndian.Uint64(s[24:])^k)
	}
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(b[i:])^k)
	}
	for ; i < len(b); i++ {
		b[i] ^= byte(k >> (8 * uint(i&3)))
	}
}

// WSFrameHeaderLen returns the length of the header AppendWSFrameHeader
// writes for a payload of n bytes: 2, 4 or 10.
func WSFrameHeaderLen(n int) int {
	switch {
	case n <= 125:
		return 2
	case n <= 0xffff:
		return 4
	}
	return 10
}

// AppendWSFrameHeader appends the header of an unmasked server frame with
// the given opcode, FIN bit and payload length; the payload is to follow.
// It uses the shortest length encoding. Use it to send a payload that is
// kept elsewhere without copying it (a vectored write), or to frame the
// fragments of a message (opcode WSText or WSBinary on the first,
// WSContinuation on the rest, fin on the last). It returns
// ErrWSInvalidFrame for an unknown opcode, a negative length, or a control
// frame that is not fin or whose payload is over 125 bytes. It allocates
// nothing when dst has room; it may be called from any goroutine.
func AppendWSFrameHeader(dst []byte, op WSOpcode, fin bool, payloadLen int) ([]byte, error) {
	switch op {
	case WSContinuation, WSText, WSBinary:
	case WSClose, WSPing, WSPong:
		if !fin || payloadLen > WSMaxControlPayload {
			return dst, ErrWSInvalidFrame
		}
	default:
		return dst, ErrWSInvalidFrame
	}
	if payloadLen < 0 {
		return dst, ErrWSInvalidFrame
	}
	b0 := byte(op)
	if fin {
		b0 |= 0x80
	}
	switch {
	case payloadLen <= 125:
		return append(dst, b0, byte(payloadLen)), nil
	case payloadLen <= 0xffff:
		return append(dst, b0, 126, byte(payloadLen>>8), byte(payloadLen)), nil
	}
	n := uint64(payloadLen)
	return append(dst, b0, 127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
		byte(n>>24), byte(n>>16), byte(n>>8), byte(n)), nil
}

// AppendWSFrame appends a complete unmasked server frame: the header
// AppendWSFrameHeader writes, then payload. AppendWSFrame(dst, WSText,
// true, msg) writes a text message in one frame (the caller vouches for
// its UTF-8), WSBinary a binary message, WSPing and WSPong control frames
// (payload at most 125 bytes); use AppendWSClose for close frames.
//
// Server frames are never masked, so the bytes written are the same for
// every connection: to broadcast, encode the frame once
// (frame, _ := AppendWSFrame(scratch[:0], WSText, true, msg)) and append
// frame to each connection's output; no per-connection encoding is
// needed. It returns ErrWSInvalidFrame as AppendWSFrameHeader does, with
// dst unchanged. It allocates nothing when dst has room; it may be called
// from any goroutine.
func AppendWSFrame(dst []byte, op WSOpcode, fin bool, payload []byte) ([]byte, error) {
	dst, err := AppendWSFrameHeader(dst, op, fin, len(payload))
	if err != nil {
		return dst, err
	}
	return append(dst, payload...), nil
}

// AppendWSClose appends an unmasked close frame. A code of 0 writes a
// close frame without a payload (reported to the peer as 1005, no status);
// otherwise code must satisfy ValidWSCloseCode and reason must be valid
// UTF-8 of at most 123 bytes, else it returns ErrWSInvalidFrame with dst
// unchanged. It allocates nothing when dst has room; it may be called from
// any goroutine.
func AppendWSClose(dst []byte, code uint16, reason []byte) ([]byte, error) {
	if code == 0 {
		if len(reason) > 0 {
			return dst, ErrWSInvalidFrame
		}
		return append(dst, 0x80|byte(WSClose), 0), nil
	}
	if !ValidWSCloseCode(code) || len(reason) > WSMaxControlPayload-2 || !utf8.Valid(reason) {
		return dst, ErrWSInvalidFrame
	}
	dst = append(dst, 0x80|byte(WSClose), byte(2+len(reason)), byte(code>>8), byte(code))
	return append(dst, reason...), nil
}
