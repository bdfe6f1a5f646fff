package nethttp

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
)

// writer is the http.ResponseWriter of a net/http handler. Its methods run on the
// handler's goroutine (net/http's rule: one goroutine at a time).
type writer struct {
	x        *exchange
	ctx      context.Context
	header   http.Header
	isHead   bool
	http10   bool
	status   int         // 0 until WriteHeader
	snap     http.Header // the header as WriteHeader saw it (net/http ignores later changes)
	declared int64       // the handler's Content-Length, -1 when none
	written  int64
	buf      []byte
	head     *head // built when the head is committed
	flushed  bool  // something was handed to the task before the end
	err      error // sticky: what writes return
}

var (
	_ http.ResponseWriter = (*writer)(nil)
	_ http.Flusher        = (*writer)(nil)
)

// Header returns the response header map; changes after WriteHeader have no effect
// (except trailers), as in net/http.
func (w *writer) Header() http.Header { return w.header }

// WriteHeader sends the status code with the header (at the first flush or when the
// handler returns). A second call is ignored; 1xx codes other than 101 are dropped (not
// supported). It panics on a code outside 100-999, as net/http does, and on 101: the
// adapter is no http.Hijacker, so the switch a 101 announces could never follow (the
// handler's panic is answered with 500; a native handler upgrades).
func (w *writer) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code == 101 && w.status == 0 {
		panic("nethttp: WriteHeader(101) in a net/http handler: no protocol switch can follow (no http.Hijacker); upgrade with a native handler")
	}
	if w.status != 0 || code < 200 {
		return
	}
	w.status = code
	w.snap = w.header.Clone()
	if v := w.snap.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			w.declared = n
		} else {
			w.snap.Del("Content-Length")
		}
	}
}

// bodyAllowed reports whether the status allows a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != 204 && status != 304
}

// Write writes body bytes: the first 2 KiB are held until the handler returns or flushes
// (so that a short response gets a Content-Length), later bytes are handed to the loop in
// pieces of up to 32 KiB, waiting while the client is far behind. It returns
// http.ErrBodyNotAllowed for a status without a body, http.ErrContentLength past a
// declared length, ErrClientGone once the client has gone.
func (w *writer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(200)
	}
	if w.err != nil {
		return 0, w.err
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.declared >= 0 && w.written > w.declared {
		return 0, http.ErrContentLength
	}
	n := 0
	for len(p) > 0 {
		limit := chunkBytes
		if w.head == nil {
			if len(w.buf)+len(p) <= bufferBeforeCommit {
				w.buf = append(w.buf, p...)
				return n + len(p), nil
			}
			sniff := w.buf // what net/http's buffer would hold when it spills
			if len(sniff) < bufferBeforeCommit {
				sniff = append(slices.Clip(sniff), p[:min(len(p), bufferBeforeCommit-len(sniff))]...)
			}
			w.commit(false, sniff) // past the threshold: stream it
		}
		k := min(len(p), limit-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p, n = p[k:], n+k
		if len(w.buf) >= limit {
			if err := w.handoff(msgFlush); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// WriteString is Write for a string (io.StringWriter).
func (w *writer) WriteString(s string) (int, error) { return w.Write(unsafeBytes(s)) }

// Flush sends the head and what was written so far; it blocks while the client is more
// than 256 KiB behind.
func (w *writer) Flush() { _ = w.FlushError() }

// FlushError is Flush returning the error (used by http.ResponseController.Flush).
func (w *writer) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(200)
	}
	if w.err != nil {
		return w.err
	}
	if w.head == nil {
		w.commit(false, w.buf)
	}
	return w.handoff(msgFlush)
}

// SetReadDeadline does nothing and returns nil (http.ResponseController): a streamed body
// is bounded by loop.Config.HandlerTimeout, a buffered one was read before the handler started.
func (w *writer) SetReadDeadline(time.Time) error { return nil }

// EnableFullDuplex returns nil: the handler may read the body and write the response in
// any order (http.ResponseController).
func (w *writer) EnableFullDuplex() error { return nil }

// commit builds the response head from the header snapshot. final says the handler has
// returned, so a body not yet flushed gets a Content-Length; sniff is the start of the
// body, for the Content-Type when the handler set none.
func (w *writer) commit(final bool, sniff []byte) {
	if w.status == 0 {
		w.WriteHeader(200)
	}
	h := &head{status: w.status, cl: -1, noBody: !bodyAllowed(w.status)}
	trailers, hasTE := false, false
	for k, vv := range w.snap {
		switch {
		case strings.HasPrefix(k, http.TrailerPrefix), k == "Trailer":
			trailers = true
		case k == "Transfer-Encoding":
			hasTE = true
		case k == "Connection":
			for _, v := range vv {
				if strings.Contains(strings.ToLower(v), "close") {
					h.closeConn = true
				}
			}
		}
	}
	for _, k := range sortedKeys(w.snap) {
		if strings.HasPrefix(k, http.TrailerPrefix) || k == "Transfer-Encoding" || k == "Connection" ||
			k == "Content-Length" || k == "Date" || !validField(k) {
			continue
		}
		for _, v := range w.snap[k] {
			h.hdrs = append(h.hdrs, [2]string{k, sanitizeValue(v)})
		}
	}
	if !h.noBody && !hasTE {
		if _, ok := w.snap["Content-Type"]; !ok && len(sniff) > 0 {
			h.hdrs = append(h.hdrs, [2]string{"Content-Type", http.DetectContentType(sniff)})
		}
	}
	switch {
	case h.noBody:
	case w.declared >= 0:
		h.cl = w.declared
	case final && !trailers && !hasTE && (!w.isHead || len(w.buf) > 0):
		h.cl = int64(len(w.buf))
	case final && w.isHead:
		h.cl = 0
	default:
		h.chunked = !w.http10 // the loop's Stream frames it so
	}
	w.head = h
}

// handoff gives the task (or, in multi-thread mode, the Ctx directly) the buffered bytes
// and, with msgFlush, waits until they are written. On the handler's goroutine.
func (w *writer) handoff(msg msgKind) error {
	x := w.x
	if msg == msgFlush {
		w.flushed = true
	}
	if c := x.direct; c != nil { // multi-thread mode: this goroutine owns c
		err := x.apply(c, w.head, w.buf, msg)
		w.buf = w.buf[:0]
		if msg == msgFinal {
			x.end(c)
			return nil
		}
		if err != nil {
			w.err = err
		}
		return err
	}
	x.mu.Lock()
	if x.gone {
		w.err = x.err
		x.mu.Unlock()
		if w.err == nil {
			w.err = loop.ErrClientGone
		}
		return w.err
	}
	x.head, x.msg, x.data = w.head, msg, w.buf
	resume := x.resume
	x.resume = nil
	x.mu.Unlock()
	if resume != nil {
		resume()
	}
	if msg == msgFinal {
		return nil
	}
	select {
	case <-x.ack:
	case <-w.ctx.Done():
	}
	x.mu.Lock()
	if x.msg != msgNone { // the task never took it (it is gone): withdraw it
		x.msg, x.data = msgNone, nil
		x.gone = true
		if x.err == nil {
			x.err = context.Cause(w.ctx)
		}
	}
	err := x.err
	x.mu.Unlock()
	w.buf = w.buf[:0]
	if err != nil {
		w.err = err
	}
	return err
}

// finish ends the response when the handler has returned (or panicked: pv and its stack).
func (w *writer) finish(pv any, stack []byte) {
	if pv != nil {
		w.x.mu.Lock()
		w.x.panicV, w.x.stack = pv, stack
		w.x.mu.Unlock()
		if w.head == nil {
			w.buf = w.buf[:0] // a panic before the head: the loop answers 500
		}
	}
	if w.head == nil && pv == nil {
		w.commit(true, w.buf)
	}
	if pv == nil {
		if t := w.trailers(); len(t) > 0 {
			w.x.mu.Lock()
			w.x.trailers = t
			w.x.mu.Unlock()
		}
	}
	_ = w.handoff(msgFinal)
}

// trailers collects the trailer values: the keys declared in the "Trailer" header and
// the keys set with http.TrailerPrefix, read from the header map now that the handler has
// returned. Only a chunked body carries them.
func (w *writer) trailers() http.Header {
	if w.head == nil || !w.head.chunked {
		return nil
	}
	var t http.Header
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if t == nil {
				t = http.Header{}
			}
			t[http.CanonicalHeaderKey(name)] = slices.Clone(vv)
		}
	}
	for _, decl := range w.snap["Trailer"] {
		for _, k := range strings.Split(decl, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			if vv := w.header[k]; k != "" && len(vv) > 0 {
				if t == nil {
					t = http.Header{}
				}
				t[k] = slices.Clone(vv)
			}
		}
	}
	return t
}

// sortedKeys returns h's keys in order (net/http writes headers sorted).
func sortedKeys(h http.Header) []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// validField reports whether k may be written as a header name; net/http drops the
// others silently, and so does the adapter.
func validField(k string) bool { return httpcodec.ValidHeaderName(unsafeBytes(k)) }

// reserved reports the header names the server writes itself (loop.Ctx.AddHeader refuses
// them).
func reserved(k string) bool {
	return strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Transfer-Encoding") ||
		strings.EqualFold(k, "Connection") || strings.EqualFold(k, "Date")
}

// unsafeBytes views s as bytes for read-only use.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// sanitizeValue replaces the bytes a header value must not hold (CR, LF, NUL and other
// controls but tab) with spaces, as net/http does for newlines.
func sanitizeValue(v string) string {
	if httpcodec.ValidHeaderValue(unsafeBytes(v)) {
		return v
	}
	b := []byte(v)
	for i, ch := range b {
		if (ch < 0x20 && ch != '\t') || ch == 0x7f {
			b[i] = ' '
		}
	}
	return string(b)
}
