package loop

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The drain's logic without sockets: fake connections, and a fake clock (the turn's
// reading, which every deadline the loop sets is taken from).
func TestDrainUnit(t *testing.T) {
	s := New(Config{Logger: quietLogger(t), IdleTimeout: time.Minute})
	t.Cleanup(s.sched.Close)
	const now = int64(5 * time.Second)
	s.turnAt = now
	hooked := 0
	s.Loop(0).OnDrain(func(time.Time) { hooked++ })
	csIdle := s.newConn(&fakeConn{})
	require.Equal(t, now+int64(time.Minute), csIdle.deadline, "idle timeout before the drain")
	csReading := s.newConn(&fakeConn{in: []byte("GET / HTTP/1.1\r\n")}) // a head on its way
	csBusy := s.newConn(&fakeConn{})
	csBusy.ctx = &Ctx{} // a request in flight
	s.inflight = 1

	s.life.v.Store(int32(stateDraining)) // as Shutdown leaves it
	s.beginDrain()
	s.beginDrain() // once only
	require.Equal(t, 1, hooked)
	require.True(t, s.Draining().Done())
	require.Equal(t, 1, s.drain.report.ClosedIdle)
	require.Equal(t, 1, s.drain.report.InFlight)
	require.Equal(t, 3, s.conns.beforeDrain)
	require.Equal(t, now+int64(drainIdleGrace), csIdle.deadline, "an idle connection gets the short grace")
	require.Equal(t, now+int64(time.Minute), csReading.deadline, "a connection with input is left to answer it")

	late := s.newConn(&fakeConn{}) // opened during the drain: not waited for
	require.Equal(t, now+int64(drainIdleGrace), late.deadline)
	require.Equal(t, 3, s.conns.beforeDrain)

	s.connClosed(csIdle)
	s.connClosed(csReading)
	csBusy.ctx, s.inflight = nil, 0 // its request finished
	s.checkDrained()
	require.Equal(t, stateDraining, s.life.load(), "a connection open when the drain began is still open")
	s.connClosed(csBusy)
	require.Equal(t, stateStopping, s.life.load(), "drained although a connection opened during the drain is open")
	require.Zero(t, s.drain.report.ForcedTasks)
}

// Once the drain has nothing left the loop stops taking requests (stateStopping), but it
// goes on turning until the connections the listener took last have reached it
// (acceptor.settled). A request arriving then, or waiting in a connection when its idle
// deadline passes, is answered 503 (it did not run; Retry-After), never closed without a
// byte: the loss TestDrainAnswersOrRefusesEveryConnection/two_shards showed in
// multi-thread mode under load, where that wait lasted long enough for the idle deadline.
func TestDrainAnswersRequestsTheStoppingLoopWillNotRun(t *testing.T) {
	s := New(Config{Logger: quietLogger(t)})
	t.Cleanup(s.sched.Close)
	const now = int64(5 * time.Second)
	s.turnAt = now
	s.life.v.Store(int32(stateDraining)) // as Shutdown leaves it
	s.beginDrain()                       // nothing in flight: drained at once
	require.Equal(t, stateStopping, s.life.load())
	const req = "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"

	// A connection the listener took before the stop, registered after it, with a request.
	fc := &recordingConn{fakeConn: fakeConn{in: []byte(req)}}
	cs := s.newConn(fc)
	fc.ctx = cs
	(*events)(s).OnTraffic(fc)
	require.True(t, strings.HasPrefix(string(fc.out), "HTTP/1.1 503 "), "the request reaching the stopping loop: %q", fc.out)
	require.Contains(t, string(fc.out), "Retry-After: 1\r\n")
	require.Zero(t, fc.InboundBuffered(), "its request is dropped, not parsed")
	require.GreaterOrEqual(t, cs.state, connClosing, "closed gracefully after the 503")

	// A request buffered on a connection whose idle deadline passes before the stop.
	fc2 := &recordingConn{fakeConn: fakeConn{in: []byte(req)}}
	cs2 := s.newConn(fc2)
	fc2.ctx = cs2
	cs2.heard = true
	s.turnAt = 0
	s.sweep(cs2.deadline)
	require.True(t, strings.HasPrefix(string(fc2.out), "HTTP/1.1 503 "), "the request waiting at the idle deadline: %q", fc2.out)
	require.GreaterOrEqual(t, cs2.state, connClosing)
}

// recordingConn is a fakeConn that keeps what is written to it and takes Discard(-1) (all)
// and Close; Fd is invalid, so a half-close fails and the connection is closed at once.
type recordingConn struct {
	fakeConn
	out    []byte
	closed bool
}

func (f *recordingConn) Discard(n int) (int, error) {
	if n < 0 {
		n = f.InboundBuffered()
	}
	f.off += n
	return n, nil
}
func (f *recordingConn) Write(p []byte) (int, error) { f.out = append(f.out, p...); return len(p), nil }
func (f *recordingConn) Fd() int                     { return -1 }
func (f *recordingConn) Close() error                { f.closed = true; return nil }
