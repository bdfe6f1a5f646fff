package scheduler

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// atDepth calls fn below depth extra frames of about 256 bytes each, so that fn's frame
// sits at another address of the same stack.
func atDepth(depth int, fn func()) {
	var pad [256]byte
	if depth == 0 {
		fn()
		return
	}
	atDepth(depth-1, fn)
	pad[depth%len(pad)]++ // keeps pad (and so the frame's size) alive
}

// TestCheckLoopAcrossDepths: Run and RunAt called on the loop from call sites at many
// stack depths run their tasks (the frame check confirms each new depth by goroutine id
// and never panics on the loop), the range of confirmed frame addresses stays within
// maxFrameSpread, and a call from another goroutine still panics afterwards.
func TestCheckLoopAcrossDepths(t *testing.T) {
	s := newSync(t, Config{})
	runs := 0
	task := s.Go(func(t *Task) {
		for t.Park(ReasonOther) == nil {
			runs++
		}
	})
	s.Run()
	for i := range 40 {
		depth := (i * 7) % 23 // up and down the stack
		s.Wake(task)
		atDepth(depth, func() {
			if i%2 == 0 {
				s.Run()
			} else {
				s.RunAt(s.Now())
			}
		})
		require.Equal(t, i+1, runs, "call at depth %d", depth)
		assert.LessOrEqual(t, s.spSpan, uintptr(maxFrameSpread))
		assert.NotZero(t, s.spLo)
	}
	for _, run := range []func(){func() { s.Run() }, func() { s.RunAt(0) }} {
		ch := make(chan string)
		go func() {
			defer func() { ch <- fmt.Sprint(recover()) }()
			run()
		}()
		assert.Contains(t, <-ch, "only the loop goroutine")
	}
}

// TestOnLoop: the loop goroutine and its tasks' coroutines are on the loop; another
// goroutine is not.
func TestOnLoop(t *testing.T) {
	s := New(Config{Post: func(func()) {}})
	got := make(chan bool, 1)
	go func() { got <- s.OnLoop() }()
	require.False(t, <-got, "a goroutine before the loop ran")
	var inTask bool
	s.Spawn(func(*Task) { inTask = s.OnLoop() }, nil)
	s.Run()
	assert.True(t, inTask, "a task's coroutine")
	assert.True(t, s.OnLoop(), "the loop goroutine (the first caller of Run)")
	go func() { got <- s.OnLoop() }()
	assert.False(t, <-got, "another goroutine")
	s.Close()
}
