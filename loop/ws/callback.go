package ws

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
)

// Handler is the callback form of a WebSocket connection (UpgradeTo): the connection holds
// no task while idle, and each whole message runs OnMessage on the loop.
type Handler struct {
	// OnMessage runs on the loop, outside any task, for each whole message from the
	// client: binary false for text (valid UTF-8). data is a view into the connection's
	// input, valid only during the call: copy what must outlive it. It must not block:
	// it runs as a short slice of the loop, and its time is accounted to the connection
	// and its route as the task form's per-message time is. Nothing it calls on a
	// callback-form connection parks (see UpgradeTo); to do work that parks, start a task
	// (Loop.Go). A panic closes the connection with 1011 and is counted; the loop lives
	// on. Required.
	OnMessage func(w *Conn, binary bool, data []byte)
	// OnClose runs once, on the loop outside any task, after the connection ended, with
	// why (the errors ReadMessage returns in the task form: *CloseError,
	// loop.ErrClientGone, ErrSlowConsumer, ...). It runs after the event that ended the
	// connection has been handled, never from inside another connection's call (a
	// Broadcast that closes a slow consumer does not run its OnClose in the middle of the
	// loop over a room), and never before the handler that upgraded has returned.
	// Optional.
	OnClose func(w *Conn, err error)
}

// UpgradeTo is Upgrade in the callback form: it checks and answers the upgrade as Upgrade
// does, and the connection then outlives the handler: the handler returns, its task and
// request (with the request's memory) are released, and an idle connection holds no task.
// Each whole message runs h.OnMessage on the loop once the handler has returned (messages
// that arrive before wait); h.OnClose runs when the connection ends.
//
// Nothing parks on a callback-form connection, whoever calls: WriteText and WriteBinary
// queue the message and, past Config.MaxQueuedBytes, close the client as a slow consumer
// (1008) and return ErrSlowConsumer, as Send does; Close queues the close frame and
// returns (Config.CloseTimeout still bounds the handshake); ReadMessage returns
// ErrCallbackForm. Limits, keepalive, slow-consumer closes, the drain's 1001 and the
// stats section work as in the task form. It panics if h.OnMessage is nil. Call it from
// the handler, before writing anything.
func UpgradeTo(c *loop.Ctx, cfg Config, h Handler) (*Conn, error) {
	if h.OnMessage == nil {
		panic("ws: UpgradeTo with a nil Handler.OnMessage")
	}
	return upgrade(c, &cfg, &h)
}

// deliver runs OnMessage for a whole message and accounts its time. Loop-confined.
func (w *Conn) deliver(binary bool, p []byte) {
	if !w.st.acct {
		w.callMessage(binary, p)
		return
	}
	start := time.Now()
	w.callMessage(binary, p)
	w.record(time.Since(start))
}

func (w *Conn) callMessage(binary bool, p []byte) {
	defer func() {
		if v := recover(); v != nil {
			w.callbackPanicked("OnMessage", v, debug.Stack())
		}
	}()
	w.h.OnMessage(w, binary, p)
}

// callbackPanicked counts and logs (rate-limited) a panic of a callback and closes the
// connection with 1011.
func (w *Conn) callbackPanicked(which string, v any, stack []byte) {
	st := w.st
	st.callbackPanics++
	if st.panicLog.allow(st.l) {
		st.logger.Error("ws: "+which+" panicked", "route", w.route.pattern, "conn", w.id, "panic", v,
			"callback_panics_total", st.callbackPanics, "stack", string(stack))
	}
	if w.state != stateDone {
		w.fail(httpcodec.WSCloseInternalError, "handler failed", fmt.Errorf("ws: %s panicked: %v", which, v), false)
	}
}

// later queues w for runLater: its OnClose is due, or input arrived while its handler
// ran. Loop-confined.
func (w *Conn) later() {
	if w.laterQueued {
		return
	}
	w.laterQueued = true
	st := w.st
	st.later = append(st.later, w)
	if !st.laterPosted {
		if st.runLaterFn == nil {
			st.runLaterFn = st.runLater // made once: a method value allocates
		}
		st.laterPosted = st.l.Post(st.runLaterFn) == nil
		if !st.laterPosted { // the loop is stopping: no further turn
			st.runLater()
		}
	}
}

// runLater runs the queued callback-form work: OnClose of connections that ended, and the
// messages that waited for their handler's return. It runs from Loop.Post (outside any
// task) or, at the final stop, directly. Loop-confined.
func (st *loopState) runLater() {
	st.laterPosted = false
	for i := 0; i < len(st.later); i++ {
		w := st.later[i]
		st.later[i] = nil
		w.laterQueued = false
		switch {
		case w.running: // the handler still runs: OnHandlerReturn queues it again
		case w.state == stateDone:
			w.deliverQueued() // messages that arrived before the end, then OnClose
			w.callClose()
		default:
			w.answerDuePong()
			w.deliverQueued()
		}
	}
	st.later = st.later[:0]
	if cap(st.later) > 1024 {
		st.later = nil
	}
}

func (w *Conn) callClose() {
	if w.closeCalled {
		return
	}
	w.closeCalled = true
	if w.h.OnClose == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			w.callbackPanicked("OnClose", v, debug.Stack())
		}
	}()
	w.h.OnClose(w, w.endErr())
}
