package loop

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/batonrt/baton/internal/httpcodec"
)

// ErrWSCallbackForm is returned by ReadMessage on a connection made with UpgradeTo: its
// messages go to WSHandler.OnMessage.
var ErrWSCallbackForm = errors.New("loop: ReadMessage on a callback-form WebSocket (UpgradeTo): messages go to OnMessage")

// WSHandler is the callback form of a WebSocket connection (Ctx.UpgradeTo): the
// connection holds no task while idle, and each whole message runs OnMessage on the loop.
type WSHandler struct {
	// OnMessage runs on the loop, outside any task, for each whole message from the
	// client: binary false for text (valid UTF-8). data is a view into the connection's
	// input, valid only during the call: copy what must outlive it. It must not block:
	// it runs as a short slice of the loop, and its time is accounted to the connection
	// and its route as the task form's per-message time is. Nothing it calls on a
	// callback-form connection parks (see UpgradeTo); to do work that parks, start a task
	// (Loop.Go). A panic closes the connection with 1011 and is counted; the loop lives
	// on. Required.
	OnMessage func(w *WSConn, binary bool, data []byte)
	// OnClose runs once, on the loop outside any task, after the connection ended, with
	// why (the errors ReadMessage returns in the task form: *CloseError, ErrClientGone,
	// ErrSlowConsumer, ...). It runs after the event that ended the connection has been
	// handled, never from inside another connection's call (a Broadcast that closes a
	// slow consumer does not run its OnClose in the middle of the loop over a room), and
	// never before the handler that upgraded has returned. Optional.
	OnClose func(w *WSConn, err error)
}

// UpgradeTo is Upgrade in the callback form: it checks and answers the upgrade as Upgrade
// does, and the connection then outlives the handler: the handler returns, its task and
// request (with the request's memory) are released, and an idle connection holds no task.
// Each whole message runs h.OnMessage on the loop once the handler has returned (messages
// that arrive before wait); h.OnClose runs when the connection ends.
//
// Nothing parks on a callback-form connection, whoever calls: WriteText and WriteBinary
// queue the message and, past Config.WebSocket.MaxQueuedBytes, close the client as a slow
// consumer (1008) and return ErrSlowConsumer, as Send does; Close queues the close frame
// and returns (Config.WebSocket.CloseTimeout still bounds the handshake); ReadMessage
// returns ErrWSCallbackForm. Limits, keepalive, slow-consumer closes, the drain's 1001
// and the stats page work as in the task form. It panics if h.OnMessage is nil. Call it
// from the handler, before writing anything.
func (c *Ctx) UpgradeTo(opts UpgradeOptions, h WSHandler) (*WSConn, error) {
	if h.OnMessage == nil {
		panic("loop: Ctx.UpgradeTo with a nil WSHandler.OnMessage")
	}
	w, err := c.upgrade(opts, &h)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// deliver runs OnMessage for a whole message and accounts its time. Loop-confined.
func (w *WSConn) deliver(binary bool, p []byte) {
	s := w.srv
	if !s.acct.on {
		w.callMessage(binary, p)
		return
	}
	start := s.nanotime()
	w.callMessage(binary, p)
	d := time.Duration(s.nanotime() - start)
	w.st.onLoop += d
	w.st.onLoopMax = max(w.st.onLoopMax, d)
	w.route.recordOnLoop(d)
}

func (w *WSConn) callMessage(binary bool, p []byte) {
	defer func() {
		if v := recover(); v != nil {
			w.callbackPanicked("OnMessage", v, debug.Stack())
		}
	}()
	w.h.OnMessage(w, binary, p)
}

// callbackPanicked counts and logs (rate-limited) a panic of a callback and closes the
// connection with 1011.
func (w *WSConn) callbackPanicked(which string, v any, stack []byte) {
	s := w.srv
	s.panics++
	s.ws.callbackPanics++
	if ok, suppressed := s.panicLog.Allow(s.timeAt(s.now())); ok {
		s.log.Error("loop: websocket "+which+" panicked", "route", w.route.pattern, "conn", w.id, "panic", v,
			"panics_total", s.panics, "suppressed", suppressed, "stack", string(stack))
	}
	if w.state != wsDone {
		w.fail(httpcodec.WSCloseInternalError, "handler failed", fmt.Errorf("loop: websocket %s panicked: %v", which, v), false)
	}
}

// later queues w for wsRunLater: its OnClose is due, or input arrived while its handler
// ran. Loop-confined.
func (w *WSConn) later() {
	if w.laterQueued {
		return
	}
	w.laterQueued = true
	ws := &w.srv.ws
	ws.later = append(ws.later, w)
	if !ws.laterPosted {
		if ws.runLater == nil {
			ws.runLater = w.srv.wsRunLater // made once: a method value allocates
		}
		ws.laterPosted = w.srv.door.post(ws.runLater)
		if !ws.laterPosted { // the loop is stopping: no further turn
			w.srv.wsRunLater()
		}
	}
}

// wsRunLater runs the queued callback-form work: OnClose of connections that ended, and
// the messages that waited for their handler's return. It runs from the door (outside
// any task, then the loop pumps) or, at the final stop, directly. Loop-confined.
func (s *Server) wsRunLater() {
	ws := &s.ws
	ws.laterPosted = false
	for i := 0; i < len(ws.later); i++ {
		w := ws.later[i]
		ws.later[i] = nil
		w.laterQueued = false
		switch {
		case w.c != nil: // the handler still runs: handlerDone queues it again
		case w.state == wsDone:
			w.deliverQueued() // messages that arrived before the end, then OnClose
			w.callClose()
		default:
			w.pump()
		}
	}
	ws.later = ws.later[:0]
	if cap(ws.later) > 1024 {
		ws.later = nil
	}
}

func (w *WSConn) callClose() {
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
