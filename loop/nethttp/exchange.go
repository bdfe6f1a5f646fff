package nethttp

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// msgKind is what the writer hands the task.
type msgKind uint8

const (
	msgNone  msgKind = iota
	msgFlush         // write data to the connection now, then acknowledge
	msgFinal         // the handler returned: write data and end the response
)

// head is the response head as the handler left it when it was committed: immutable.
type head struct {
	status    int
	hdrs      [][2]string // sanitised, without the headers the server writes
	cl        int64       // Content-Length, -1 when none
	chunked   bool        // chunked body (HTTP/1.1 without a length): trailers may follow
	closeConn bool        // the handler said "Connection: close"
	noBody    bool        // 204 or 304
}

// exchange is where a net/http handler's goroutine (the writer) and the request's task
// meet. Fields under mu are shared; the rest belong to one side, as marked.
type exchange struct {
	direct *loop.Ctx // multi-thread mode: the writer applies its messages to this Ctx itself

	mu       sync.Mutex
	msg      msgKind     // the pending message, msgNone when there is none
	data     []byte      // its body bytes, the writer's: the task copies them under mu
	head     *head       // set with the first message that commits the head
	trailers http.Header // with msgFinal: the trailers, immutable
	panicV   any         // with msgFinal: the handler's panic, if it panicked
	stack    []byte
	resume   func() // the task's wake while it is parked waiting for a message
	err      error  // set by the task: what the writer's writes return from now on
	gone     bool   // the task no longer takes messages

	ack chan struct{} // the task acknowledges a flush (capacity 1)

	// Task side (or, in multi-thread mode, the writer's, which owns the Ctx then).
	committed bool
	st        *loop.Stream // the response body's stream; nil before the head or when written whole
	scratch   []byte       // the pending message's bytes, copied out of the writer's buffer
}

// serve takes the writer's messages and writes them to c until the handler returns or the
// task is cancelled. On c's task (single-thread mode).
func (x *exchange) serve(c *loop.Ctx) {
	hook := c.OffloadHook()
	for {
		resume, park := hook.Suspend(offload.WaitResult)
		x.mu.Lock()
		msg := x.msg
		if msg == msgNone {
			x.resume = resume
			x.mu.Unlock()
			if err := park(); err != nil {
				x.shut(err)
				return
			}
			continue
		}
		// A flush's bytes are copied under mu: once the writer's wait for the ack ends (its
		// context done) it reuses its buffer. A final message's are not: the writer is done.
		data := x.data
		if msg == msgFlush {
			x.scratch = append(x.scratch[:0], data...)
			data = x.scratch
		}
		h := x.head
		x.msg, x.data = msgNone, nil
		x.mu.Unlock()
		err := x.apply(c, h, data, msg)
		if msg == msgFinal {
			x.end(c)
			return
		}
		x.mu.Lock()
		if err != nil && x.err == nil {
			x.err, x.gone = err, true
		}
		x.mu.Unlock()
		select { // a full channel holds an ack the writer has yet to take: it wakes either way
		case x.ack <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// shut stops taking messages: the task was cancelled (err) and is about to end.
func (x *exchange) shut(err error) {
	x.mu.Lock()
	x.gone = true
	if x.err == nil {
		x.err = err
	}
	x.resume = nil
	x.mu.Unlock()
	select {
	case x.ack <- struct{}{}:
	default:
	}
}

// apply writes one message to c: the head h if it is not written yet, then data; a flush
// hands it to the connection and waits while the client is far behind (a Stream.Write of no bytes). On
// c's task or goroutine.
func (x *exchange) apply(c *loop.Ctx, h *head, data []byte, msg msgKind) error {
	if !x.committed && h != nil {
		x.committed = true
		if x.commit(c, h, data, msg == msgFinal) {
			return nil // written whole with the head
		}
	}
	if x.st == nil || h.noBody {
		return nil
	}
	if len(data) > 0 {
		_, err := x.st.Write(data) // Write flushes
		return err
	}
	if msg == msgFlush {
		_, err := x.st.Write(nil) // what was written, the head included, now
		return err
	}
	return nil
}

// commit writes the response head and reports whether it wrote the whole response (a
// final message whose body matches its length). On c's task or goroutine.
func (x *exchange) commit(c *loop.Ctx, h *head, data []byte, final bool) bool {
	for _, kv := range h.hdrs {
		c.AddHeader(kv[0], kv[1])
	}
	if h.closeConn {
		c.SetHeader("Connection", "close")
	}
	switch {
	case h.noBody:
		x.st = c.Stream(h.status, "") // a head without a body or a length
	case h.cl >= 0 && final && int64(len(data)) == h.cl:
		c.Bytes(h.status, "", data)
		return true
	case h.cl >= 0:
		c.SetHeader("Content-Length", strconv.FormatInt(h.cl, 10))
		x.st = c.Stream(h.status, "") // a sized body: a shorter one closes the connection
	default:
		x.st = c.Stream(h.status, "") // chunked; to the close for an HTTP/1.0 client
	}
	return false
}

// end finishes the response after the final message: trailers, or the handler's panic
// (re-raised on the task, answered like a handler panic).
func (x *exchange) end(c *loop.Ctx) {
	x.mu.Lock()
	pv, stack, trailers := x.panicV, x.stack, x.trailers
	x.gone = true
	x.mu.Unlock()
	if pv != nil {
		panic(&handlerPanic{v: pv, stack: stack})
	}
	if x.st == nil || len(trailers) == 0 {
		return
	}
	for _, k := range sortedKeys(trailers) {
		if !validField(k) || reserved(k) {
			continue
		}
		for _, v := range trailers[k] {
			x.st.Trailer(k, sanitizeValue(v)) // sent after a chunked body only
		}
	}
}
