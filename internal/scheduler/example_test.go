package scheduler_test

import (
	"fmt"
	"time"

	"github.com/batonrt/baton/internal/scheduler"
)

// A minimal loop: the goroutine that calls Run is the loop, Post is a channel into it, and
// the loop runs the ready tasks after every posted function. A matchmaking task parks on a
// Future until another task resolves it; a third task sleeps.
func Example() {
	posted := make(chan func(), 16)
	s := scheduler.New(scheduler.Config{Post: func(fn func()) { posted <- fn }})
	defer s.Close()

	match := scheduler.NewFuture[string](s)
	s.Spawn(func(t *scheduler.Task) {
		fmt.Println(t.Arg(), "waits for an opponent")
		opponent, err := match.Await(t) // parks; the loop runs the others
		fmt.Println(t.Arg(), "plays", opponent, err)
	}, "alice")
	s.Spawn(func(t *scheduler.Task) {
		fmt.Println(t.Arg(), "arrives")
		t.Yield() // let everyone else run first
		match.Resolve(t.Arg().(string), nil)
	}, "bob")
	s.Go(func(t *scheduler.Task) {
		t.Sleep(10 * time.Millisecond) // a timer wakes it through Post
		fmt.Println("tick after", t.Stats().Rounds, "rounds")
	})

	for {
		more := s.Run()
		if live, _ := s.Len(); live == 0 {
			break
		}
		if !more {
			(<-posted)() // the loop would poll I/O here too
		}
	}
	// Output:
	// alice waits for an opponent
	// bob arrives
	// alice plays bob <nil>
	// tick after 2 rounds
}
