package loop

import (
	"net/http"
	"strconv"

	"github.com/batonrt/baton/internal/httpcodec"
)

// This file is the response framing a handler chooses beyond Stream's default (chunked,
// or delimited by the connection's close for HTTP/1.0): a streamed body of a declared
// length, trailers after a chunked body, and a connection closed after the response.
// loop/nethttp frames a net/http handler's response with them as net/http would; a native
// handler that knows its length (a file) or computes a checksum as it streams uses them
// too. The engine keeps the framing; the handler only states it.

// StreamLength starts a streamed response with status and contentType whose body is
// length bytes (length >= 0), sent with a Content-Length instead of chunked coding, for
// HTTP/1.0 and HTTP/1.1 clients alike. Write refuses bytes past length with
// http.ErrContentLength; a handler that returns having written fewer leaves the client a
// short body, and the connection closes after it (as net/http does). A HEAD request gets
// the head only; a status that allows no body (204, 304) gets no Content-Length and Write
// refuses its bytes with ErrBodyNotAllowed. Like Stream, it panics on a status below 200
// and when the response head was already written. From the handler's task.
func (c *Ctx) StreamLength(status int, contentType string, length int64) *Stream {
	if length < 0 {
		panic("loop: StreamLength with a negative length " + strconv.FormatInt(length, 10))
	}
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

// CloseConnection makes the connection close after this response: a response head
// written from now on says "Connection: close", and the server reads no further request
// from the connection. Called after the head went out, the connection still closes after
// the response, without the header. From the handler's task.
func (c *Ctx) CloseConnection() { c.mustClose = true }

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

// sizedWrite counts p against a StreamLength body and reports http.ErrContentLength past
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
