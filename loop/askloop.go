package loop

import (
	"context"
	"errors"
	"time"
)

// statsWait bounds how long an admin handler waits for the loop to take its figures.
const statsWait = 10 * time.Second

// errLoopSlow is askLoop's error when the loop did not run the function within its wait.
var errLoopSlow = errors.New("loop: the loop did not answer (stalled?)")

// askLoop runs fn on the loop through Post and returns its result. It gives up with
// ctx.Err() when ctx ends, with errLoopSlow after wait, and with ErrServerClosed when the
// loop will not run fn. Any goroutine but the loop's (it would wait for itself).
func askLoop[T any](ctx context.Context, s *Server, wait time.Duration, fn func() T) (T, error) {
	got := make(chan T, 1) // buffered: a late answer must not block the loop
	var zero T
	if err := s.post(func() { got <- fn() }); err != nil {
		return zero, err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case v := <-got:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-t.C:
		return zero, errLoopSlow
	case <-s.door.gone:
		select {
		case v := <-got: // it ran just before the door closed
			return v, nil
		default:
			return zero, ErrServerClosed
		}
	}
}
