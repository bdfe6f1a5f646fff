package room

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

// fakeConn stands for a member's connection: it records what Broadcast sent it.
type fakeConn struct {
	got  []string
	fail bool
	on   func() // runs inside Send
}

func (f *fakeConn) Send(m string) error {
	if f.on != nil {
		f.on()
	}
	if f.fail {
		return errors.New("closed")
	}
	f.got = append(f.got, m)
	return nil
}

// TestBroadcastReachesTheMembersConns: Broadcast sends to the conn of every member attached
// with AttachConn, counts those that took it, skips members without a conn or with a conn of
// another message type, and a member stops receiving once it left (Detach, its task ended,
// attached to another room).
func TestBroadcastReachesTheMembersConns(t *testing.T) {
	s, _ := startServer(t, loop.Config{}, nil)
	l := s.Loop(0)
	var r, other *Room[int]
	conns := make([]*fakeConn, 5)
	tasks := make([]*loop.Task, 5)
	stop := make([]chan struct{}, 5)
	looptest.OnLoop(t, l, func() {
		var err error
		r, err = New(l, Config[int]{Name: "bc", Period: time.Hour, Tick: func(*Room[int], *Tick[int]) {}})
		require.NoError(t, err)
		other, err = New(l, Config[int]{Name: "bc-other", Period: time.Hour, Tick: func(*Room[int], *Tick[int]) {}})
		require.NoError(t, err)
		for i := range conns {
			conns[i], stop[i] = &fakeConn{}, make(chan struct{})
			ch := stop[i]
			h := l.Go("member", func(tk *loop.Task) {
				for {
					select {
					case <-ch:
						return
					default:
					}
					if tk.Sleep(time.Millisecond) != nil {
						return
					}
				}
			})
			tasks[i] = h.Task()
			require.NoError(t, r.AttachConn(tasks[i], conns[i]))
		}
		require.NoError(t, r.AttachConn(tasks[4], nil)) // attached again without a conn: receives nothing
		assert.Equal(t, 4, Broadcast(r, "one"))
		assert.Equal(t, 0, Broadcast(r, 1), "no conn has Send(int)")
		conns[1].fail = true
		assert.Equal(t, 3, Broadcast(r, "two"), "a failed Send is not counted")
		conns[1].fail = false
		r.Detach(tasks[0])
		require.NoError(t, other.AttachConn(tasks[2], conns[2]))
		assert.Equal(t, 2, Broadcast(r, "three"))
		assert.Equal(t, 1, Broadcast(other, "elsewhere"))
		assert.Equal(t, 3, r.Members(), "tasks 1, 3 and 4")
		assert.Equal(t, 1, other.Members(), "task 2")
	})
	close(stop[3]) // task 3 ends: it leaves the room by itself
	require.Eventually(t, func() bool {
		n := 0
		looptest.OnLoop(t, l, func() { n = r.Members() })
		return n == 2
	}, 10*time.Second, time.Millisecond)
	looptest.OnLoop(t, l, func() { assert.Equal(t, 1, Broadcast(r, "four")) })
	assert.Equal(t, []string{"one", "two"}, conns[0].got)
	assert.Equal(t, []string{"one", "three", "four"}, conns[1].got)
	assert.Equal(t, []string{"one", "two", "elsewhere"}, conns[2].got)
	assert.Equal(t, []string{"one", "two", "three"}, conns[3].got)
	assert.Empty(t, conns[4].got)
	r.Stop()
	other.Stop()
	<-r.Done()
	<-other.Done()
	for _, ch := range stop {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

// TestBroadcastMembersChangeDuringASend: a Send that detaches members, or broadcasts to the
// same room again, neither skips nor repeats a member of the broadcast under way.
func TestBroadcastMembersChangeDuringASend(t *testing.T) {
	s, _ := startServer(t, loop.Config{}, nil)
	l := s.Loop(0)
	looptest.OnLoop(t, l, func() {
		r, err := New(l, Config[int]{Name: "bc-change", Period: time.Hour, Tick: func(*Room[int], *Tick[int]) {}})
		require.NoError(t, err)
		conns := make([]*fakeConn, 4)
		tasks := make([]*loop.Task, 4)
		for i := range conns {
			conns[i] = &fakeConn{}
			tasks[i] = r.Go("m", func(tk *loop.Task) { _ = tk.Sleep(time.Hour) }).Task()
			require.NoError(t, r.AttachConn(tasks[i], conns[i]))
		}
		nested := 0
		conns[0].on = func() { // the first to receive detaches two others and broadcasts again
			if nested == 0 {
				nested++
				r.Detach(tasks[1])
				r.Detach(tasks[3])
				nested = Broadcast(r, "inner")
			}
		}
		assert.Equal(t, 4, Broadcast(r, "outer"), "the members at the call")
		assert.Equal(t, 2, nested, "the members left after the detaches")
		assert.Equal(t, []string{"inner", "outer"}, conns[0].got) // its own Send runs the nested broadcast first
		assert.Equal(t, []string{"outer"}, conns[1].got)
		assert.Equal(t, []string{"inner", "outer"}, conns[2].got)
		assert.Equal(t, []string{"outer"}, conns[3].got)
		r.Stop()
	})
}

// countConn is a conn whose Send only counts: BenchmarkBroadcast measures the room's part.
type countConn struct{ n int }

func (c *countConn) Send(*fakeConn) error { c.n++; return nil }

// BenchmarkBroadcast measures what room.Broadcast adds per member over calling each
// member's Send directly (the copy of the conns, the type assertion, the interface call):
// 100 members whose Send only counts; ns/op and allocs/op are per member.
func BenchmarkBroadcast(b *testing.B) {
	const members = 100
	s, _ := startServer(b, loop.Config{}, nil)
	l := s.Loop(0)
	looptest.OnLoop(b, l, func() {
		r, err := New(l, Config[int]{Name: "bench-bc", Period: time.Hour, Tick: func(*Room[int], *Tick[int]) {}})
		require.NoError(b, err)
		for range members {
			t := r.Go("m", func(tk *loop.Task) { _ = tk.Sleep(time.Hour) }).Task()
			require.NoError(b, r.AttachConn(t, &countConn{}))
		}
		m := &fakeConn{}
		b.ReportAllocs()
		b.ResetTimer()
		for range max(b.N/members, 1) {
			if Broadcast(r, m) != members {
				b.Fatal("a member missed the broadcast")
			}
		}
		b.StopTimer()
		r.Stop()
	})
}
