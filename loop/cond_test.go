package loop

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCondBroadcastWakesWaitersAndIsReusable, in both modes: a Broadcast from a goroutine
// wakes every waiting handler at once; handlers that wait after it wait for the next one;
// a bounded wait times out.
func TestCondBroadcastWakesWaitersAndIsReusable(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			const waiters = 20
			var parked atomic.Int32
			var cond *Cond
			_, addr := startServer(t, m.cfg(Config{}), func(s *Server) {
				cond = NewCond(s.loopRef)
				s.Handle("GET /wait", func(c *Ctx) {
					parked.Add(1)
					err := cond.Wait(c, time.Minute)
					parked.Add(-1)
					if err != nil {
						c.String(500, err.Error())
						return
					}
					c.String(200, "woke")
				})
				s.Handle("GET /short", func(c *Ctx) {
					err := cond.Wait(c, 20*time.Millisecond)
					c.String(200, fmt.Sprint(err))
				})
				s.Handle("GET /parked", func(c *Ctx) { c.String(200, fmt.Sprint(parked.Load())) })
			})
			fast := dial(t, addr)
			for round := range 2 {
				clients := make([]*client, waiters)
				for i := range clients {
					clients[i] = dial(t, addr)
					clients[i].send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
				}
				require.Eventually(t, func() bool {
					_, body := fast.get("/parked")
					return body == fmt.Sprint(waiters)
				}, 20*time.Second, time.Millisecond, "round %d: every waiter parked", round)
				_, body := fast.get("/short")
				assert.Equal(t, ErrTimeout.Error(), body, "a bounded wait with no Broadcast times out")
				_, body = fast.get("/parked")
				require.Equal(t, fmt.Sprint(waiters), body, "round %d: no waiter woke before the Broadcast", round)
				before := cond.broadcasts()
				go cond.Broadcast() // from a goroutine that is not the loop
				for _, c := range clients {
					resp, body := c.read("GET")
					require.Equal(t, 200, resp.StatusCode, body)
					require.Equal(t, "woke", body)
				}
				assert.Equal(t, before+1, cond.broadcasts())
			}
		})
	}
}

// TestCondWaitIsForTheNextBroadcast: on the loop, a task that waits after a Broadcast is
// not woken by it (the Cond keeps no "set" state); the next Broadcast wakes them all.
func TestCondWaitIsForTheNextBroadcast(t *testing.T) {
	s, _ := startServer(t, Config{}, nil)
	cond := NewCond(s.loopRef)
	var waiting atomic.Int32
	woke := make(chan string, 3)
	inLoop(t, s, func() {
		cond.Broadcast() // nobody waits: nothing to wake, nothing remembered
		for i := range 3 {
			s.Loop(0).Go(fmt.Sprint("waiter", i), func(tk *Task) {
				waiting.Add(1)
				if err := cond.Wait(tk, 0); err == nil { // parks in the same slice
					woke <- tk.name
				}
			})
		}
	})
	require.Eventually(t, func() bool { return waiting.Load() == 3 }, 10*time.Second, time.Millisecond)
	inLoop(t, s, func() {}) // a loop turn after the last increment: all three are parked
	require.Empty(t, woke, "a waiter woke from a Broadcast made before its Wait")
	cond.Broadcast()
	names := map[string]bool{}
	for range 3 {
		select {
		case n := <-woke:
			names[n] = true
		case <-time.After(10 * time.Second):
			require.FailNow(t, "a waiter did not wake")
		}
	}
	assert.Len(t, names, 3)
}

// TestCondBroadcastWithoutWaitersAllocatesNothing: a room that broadcasts every tick pays
// nothing while no long-poll waits.
func TestCondBroadcastWithoutWaitersAllocatesNothing(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0"})
	cond := NewCond(s.loopRef)
	assert.Zero(t, testing.AllocsPerRun(1000, cond.Broadcast))
	assert.EqualValues(t, 1001, cond.broadcasts())
}
