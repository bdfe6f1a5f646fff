package loop

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/batonrt/baton/internal/httpcodec"
)

// This file is the response framing a handler chooses beyond Stream's default (chunked,
// or delimited by the connection's close for HTTP/1.0): a streamed body of a declared
// length ("Content-Length" set before Stream), trailers after a chunked body, and a
// connection closed after the response ("Connection: close"). loop/nethttp frames a
// net/http handler's response with them as net/http would; a native handler that knows
// its length (a file) or computes a checksum as it streams uses them too. The engine keeps
// the framing; the handler only states it, through SetHeader as a net/http handler does.

// setFraming is SetHeader for the headers the server writes: "Connection: close" and
// "Content-Length: N" state the framing (see SetHeader); anything else panics. From the
// handler's task.
func (c *Ctx) setFraming(name, value string) {
	if c.headState() == headHandler {
		panic("loop: header " + name + " set after the response head was written")
	}
	switch {
	case strings.EqualFold(name, "Connection") && strings.EqualFold(strings.TrimSpace(value), "close"):
		c.mustClose = true
		return
	case strings.EqualFold(name, "Content-Length"):
		if n, err := strconv.ParseInt(value, 10, 64); err != nil || n < 0 {
			panic("loop: invalid Content-Length " + strconv.Quote(value))
		}
		c.delHeader(name)
		c.addHeader("Content-Length", value)
		c.declared = true
		return
	}
	panic("loop: response header " + name + ": " + strconv.Quote(value) + " is set by the server")
}

// streamLength starts a Stream whose body has the length the handler declared (a
// Content-Length set before Stream): a HEAD request gets the head only; a status that
// allows no body (204, 304) gets no Content-Length and Write refuses its bytes with
// http.ErrBodyNotAllowed. From the handler's task.
func (c *Ctx) streamLength(status int, contentType string) *Stream {
	var length int64
	for _, h := range c.hdrs {
		if strings.EqualFold(unsafeString(h.Name), "Content-Length") {
			length, _ = strconv.ParseInt(unsafeString(h.Value), 10, 64) // checked when set
		}
	}
	c.delHeader("Content-Length")
	c.declared = false
	noBody := status == 204 || status == 304
	cl := length
	if noBody {
		cl = -1
	}
	if c.writeHead(status, contentType, cl, false) {
		c.streaming, c.noBody = true, noBody
		c.sized, c.owed = !noBody, !noBody && length > 0
	}
	return &Stream{c: c, remain: length}
}

// Trailer adds a trailer field, sent after the body when the handler returns: only a
// chunked response carries trailers (an HTTP/1.1 client's Stream), the others drop them.
// Declare the names in a "Trailer" header before the head goes out, as HTTP asks. It
// panics like Ctx.AddHeader on a name that is not a token, on a value with CR, LF or NUL,
// and on the names the server writes. From the handler's task, before it returns.
func (w *Stream) Trailer(name, value string) {
	if !httpcodec.ValidHeaderName(unsafeBytes(name)) || !httpcodec.ValidHeaderValue(unsafeBytes(value)) {
		panic("loop: invalid trailer " + strconv.Quote(name) + ": " + strconv.Quote(value))
	}
	if reservedHeader(name) {
		panic("loop: trailer " + name + " is set by the server")
	}
	c := w.c
	if !c.trailers {
		// The head is written (a Stream exists): its headers' bytes are no longer read, so
		// the arena holds the trailer lines now, and Ctx stays within its size class.
		c.hdrs, c.hdrArena, c.trailers = c.hdrs[:0], c.hdrArena[:0], true
	}
	c.hdrArena = append(c.hdrArena, name...)
	c.hdrArena = append(c.hdrArena, ": "...)
	c.hdrArena = append(c.hdrArena, value...)
	c.hdrArena = append(c.hdrArena, "\r\n"...)
}

// sizedWrite counts p against a declared-length body and reports http.ErrContentLength past
// it. From the handler's task.
func (w *Stream) sizedWrite(p []byte) error {
	if int64(len(p)) > w.remain {
		return http.ErrContentLength
	}
	w.remain -= int64(len(p))
	w.c.owed = w.remain > 0
	return nil
}

// appendBodyEnd ends a chunked body: the last chunk, then the trailers if the handler
// added any. It is kept out of line: inlined, its appends sat in the middle of
// finishRequest, which every request runs, and spread its code over more cache lines.
//
//go:noinline
func (c *Ctx) appendBodyEnd() {
	if !c.trailers {
		c.out = httpcodec.AppendFinalChunk(c.out)
		return
	}
	c.out = append(c.out, "0\r\n"...)
	c.out = append(c.out, c.hdrArena...)
	c.out = append(c.out, "\r\n"...)
}
