package loop

import (
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/batonrt/baton/internal/httpcodec"
)

// headStarts caches the start of the response heads handlers write most: the status line,
// the Date header and a Content-Type, validated and formatted once per Date value (the
// loop publishes a new one every sweep) instead of once per response. A head with any
// other header (SetHeader, Server-Timing) is written in full as before; what follows the
// start (framing, Connection, the empty line) is written per response by
// httpcodec.AppendResponseHeadEnd, so the bytes are those AppendResponseHead writes.
// Loop-confined: only loop-mode handlers (and the loop itself) use it.
type headStarts struct {
	date *[]byte // the Date value the entries were made with (Server.dateBytes)
	ents [4]headStart
	next int // the entry a miss replaces
}

// headStart is one cached start. ctype is a view of the Content-Type value inside b, so
// the entry keeps no string of the caller's, or one of the engine's own Content-Type
// literals (ctypeText, ctypeJSON): those are compared by address, without runtime.memequal.
type headStart struct {
	status int // 0: empty
	ctype  string
	b      []byte
}

// get returns the start of a response with status and contentType (none if "") and the
// Date value *date, making it on a miss, or nil when AppendResponseHead refuses such a
// head (an invalid Content-Type value: the caller's full path then reports it). The
// result is valid until the next get.
func (hs *headStarts) get(status int, contentType string, date *[]byte) []byte {
	if hs.date != date {
		hs.newDate(date)
	}
	for i := range hs.ents {
		e := &hs.ents[i]
		if e.status == status && len(e.ctype) == len(contentType) &&
			(unsafe.StringData(e.ctype) == unsafe.StringData(contentType) || e.ctype == contentType) {
			return e.b
		}
	}
	return hs.fill(status, contentType, date)
}

// newDate empties the cache when the Date changed. Out of line, as fill.
//
//go:noinline
func (hs *headStarts) newDate(date *[]byte) {
	hs.date = date
	for i := range hs.ents {
		hs.ents[i].status = 0
	}
}

// fill makes the cache's entry for status and contentType, replacing the oldest. Out of
// line: a cached head's path stays short (docs/bench.md, "The split of loop").
//
//go:noinline
func (hs *headStarts) fill(status int, contentType string, date *[]byte) []byte {
	e := &hs.ents[hs.next]
	hs.next = (hs.next + 1) % len(hs.ents)
	e.status = 0
	h := httpcodec.ResponseHead{Status: status, ContentLength: -1, Date: *date}
	var ct [1]httpcodec.Header
	if contentType != "" {
		ct[0] = httpcodec.Header{Name: contentTypeName, Value: unsafeBytes(contentType)}
		h.Headers = ct[:]
	}
	b, err := httpcodec.AppendResponseHead(e.b[:0], &h)
	if err != nil {
		return nil
	}
	b = b[:len(b)-2] // the empty line: AppendResponseHeadEnd writes it
	e.b = b
	e.ctype = ""
	if contentType != "" {
		end := len(b) - 2 // the Content-Type line is the last: its value ends before its CRLF
		e.ctype = unsafeString(b[end-len(contentType) : end])
		if engineType(contentType) {
			e.ctype = contentType // static: the address says what it holds
		}
	}
	e.status = status
	return b
}

// The Content-Types the engine's own writers name (String, JSON, the 500 of a panic).
// Each is one static string, so the head cache may keep and compare it by address.
const (
	ctypeText = "text/plain; charset=utf-8"
	ctypeJSON = "application/json"
)

// engineType reports whether ct is one of the engine's Content-Type literals itself (the
// same bytes at the same address), not a caller's string that only reads the same.
func engineType(ct string) bool {
	p := unsafe.StringData(ct)
	return p == unsafe.StringData(ctypeText) && len(ct) == len(ctypeText) ||
		p == unsafe.StringData(ctypeJSON) && len(ct) == len(ctypeJSON)
}

// writeHeadCached is writeHead's path for a head without headers of the handler's own: it
// appends the cached start and the head's end and reports true, or reports false (and
// writes nothing) where the full path must run: multi-thread mode (the cache is the
// loop's), Server-Timing, a Content-Type the codec refuses. writeHead has claimed the
// response and checked the status.
func (c *Ctx) writeHeadCached(status int, contentType string, contentLength int64, chunked bool) bool {
	s := c.srv
	if !s.handlersOnLoop || (s.cfg.ServerTiming && c.route != nil) {
		return false
	}
	start := s.heads.get(status, contentType, s.dateBytes.Load())
	if start == nil {
		return false
	}
	bodyByClose := contentLength < 0 && !chunked && status >= 200 && status != 204 && status != 304
	c.closeConn = !c.req.KeepAlive || c.mustClose || s.life.draining() || bodyByClose
	n := len(c.out)
	if cap(c.out)-n < len(start)+headEndRoom {
		c.growOut(len(start) + headEndRoom)
	}
	c.out = c.out[:n+len(start)]
	copy(c.out[n:], start)
	c.out = httpcodec.AppendResponseHeadEnd(c.out, status, contentLength, chunked, c.closeConn, !c.closeConn && c.req.ProtoMinor == 0)
	return true
}

// headEndRoom is room enough for what AppendResponseHeadEnd appends (framing field,
// Connection field, empty line), made with the start's so that neither append grows.
const headEndRoom = 64

// growOut gives c.out room for n more bytes. Out of line: the growth's code stays off
// the response path's instruction-cache lines (docs/bench.md, "The split of loop").
//
//go:noinline
func (c *Ctx) growOut(n int) { c.out = slices.Grow(c.out, n) }

// headState returns c's response head state (headNone, headHandler, headServer).
func (c *Ctx) headState() int32 { return atomic.LoadInt32(&c.head) }

// claimHead moves c's response head from headNone to to and reports whether it did: the
// handler's head write and the handler deadline's 503 race for it. In multi-thread mode
// they run on different goroutines and the move is a compare-and-swap; in loop mode both
// run on the loop, where a plain test and store does the same without the locked
// instruction.
func (c *Ctx) claimHead(to int32) bool {
	if c.srv.handlersOnLoop {
		if c.head != headNone {
			return false
		}
		c.head = to
		return true
	}
	return atomic.CompareAndSwapInt32(&c.head, headNone, to)
}
