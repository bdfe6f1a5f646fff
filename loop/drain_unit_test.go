package loop

import (
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
