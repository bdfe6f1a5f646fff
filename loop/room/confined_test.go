package room

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/invariants"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

// panicOf runs fn and returns what it panicked with (nil when it returned).
func panicOf(fn func()) (p any) {
	defer func() { p = recover() }()
	fn()
	return nil
}

// TestRoomAttachTaskOfAnotherLoopPanics: a room lives on one loop; attaching a task of
// another loop (whose hooks and totals belong to that loop) panics, naming both loops,
// instead of racing on the task's state (issue 27, item 7).
func TestRoomAttachTaskOfAnotherLoopPanics(t *testing.T) {
	s, _ := startServer(t, loop.Config{Shards: 2}, nil)
	r := newRoomT(t, s, Config[int]{Name: "arena", Period: time.Hour, Tick: func(*Room[int], *Tick[int]) {}})
	defer r.Stop()
	got := make(chan [2]any, 1)
	looptest.OnLoop(t, s.Loop(1), func() {
		s.Loop(1).Go("member", func(tk *loop.Task) {
			got <- [2]any{panicOf(func() { _ = r.Attach(tk) }), panicOf(func() { r.Detach(tk) })}
		})
	})
	var p [2]any
	select {
	case p = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not run")
	}
	for i, what := range []string{"Attach", "Detach"} {
		require.NotNil(t, p[i], "%s of a task of loop 1 to a room of loop 0", what)
		msg := fmt.Sprint(p[i])
		assert.Contains(t, msg, "Room."+what)
		assert.Contains(t, msg, "loop 1")
		assert.Contains(t, msg, "loop 0")
	}
}

// TestRoomConfinedEntryPointsPanicOffTheLoop: under the invariants checks (go test -race)
// the loop-confined entry points of a room panic when called off its loop, where they
// would race with the room's tick (issue 27, item 7).
func TestRoomConfinedEntryPointsPanicOffTheLoop(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("the checks run under -race or -tags invariants; without them this test would race")
	}
	s, _ := startServer(t, loop.Config{Shards: 2}, nil)
	r := newRoomT(t, s, Config[int]{Name: "arena", Period: time.Millisecond, Tick: func(*Room[int], *Tick[int]) {}})
	defer r.Stop()
	calls := map[string]func(){
		"Stats":   func() { _ = r.Stats() },
		"Members": func() { _ = r.Members() },
		"Go":      func() { r.Go("save", func(*loop.Task) {}) },
	}
	for name, fn := range calls {
		p := panicOf(fn) // from the test's goroutine
		v, ok := p.(invariants.Violation)
		require.True(t, ok, "Room.%s off the loop: want an invariants panic, got %v", name, p)
		assert.Contains(t, v.Error(), "Room."+name)
		assert.Contains(t, v.Error(), "loop 0")
	}
	// From loop 1, a function posted there: the same.
	var p any
	looptest.OnLoop(t, s.Loop(1), func() { p = panicOf(func() { _ = r.Stats() }) })
	require.IsType(t, invariants.Violation{}, p)
	// On the room's loop they work.
	looptest.OnLoop(t, s.Loop(0), func() { p = panicOf(func() { _ = r.Stats() }) })
	require.Nil(t, p)
}
