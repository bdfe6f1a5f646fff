package room

import "github.com/batonrt/baton/loop"

// AttachConn makes t a member of the room, as Attach does, whose connection is conn:
// Broadcast sends to conn until t leaves the room (its task ends: the client went or the
// handler returned; Detach; Stop; the room moved; t attached to another room), so an
// app keeps no list of its own. conn is usually the *ws.Conn that t's handler upgraded
// (package loop/ws): a value with a method Send(M) error receives the broadcasts of
// messages of type M, and *ws.Conn has Send(*ws.PreparedMessage) error. Attaching a member
// again replaces its conn; a nil conn makes t a member that receives no broadcast. Errors
// and goroutine as Attach: loop-confined.
func (r *Room[I]) AttachConn(t *loop.Task, conn any) error {
	if err := r.Attach(t); err != nil {
		return err
	}
	ms := r.core.members
	for i := len(ms) - 1; i >= 0; i-- { // a new member is the last
		if ms[i].t == t {
			ms[i].conn = conn
			break
		}
	}
	return nil
}

// Broadcast sends m to the conn of every member attached with AttachConn whose conn has a
// method Send(M) error, and returns how many took it (their Send returned nil); members
// whose conn has no such method are skipped. With a *ws.PreparedMessage (ws.NewPrepared)
// the message is encoded once and each connection's Send copies the frame, as
// ws.Broadcast does: nothing parks, a client that does not read is closed as a slow
// consumer and not counted. It sends to the members of the moment it is called (a Send
// that makes a member join or leave changes the next broadcast) and allocates nothing per
// member. Loop-confined: from the room's tick, another task of its loop or a function run
// on it.
func Broadcast[M, I any](r *Room[I], m M) (sent int) {
	c := &r.core
	c.confined("Broadcast")
	buf := c.sendBuf
	c.sendBuf = nil // a Send that broadcasts to this room again gets a buffer of its own
	for i := range c.members {
		if v := c.members[i].conn; v != nil {
			buf = append(buf, v)
		}
	}
	for _, v := range buf {
		if s, ok := v.(interface{ Send(M) error }); ok && s.Send(m) == nil {
			sent++
		}
	}
	clear(buf) // hold no connection past the call
	c.sendBuf = buf[:0]
	return sent
}
