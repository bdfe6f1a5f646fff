package servers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestTickRecorderPaces(t *testing.T) {
	rec := newTickRecorder()
	rec.setup(RoomSetup{Rooms: 1, Iters: 100, HeavyIters: 150_000, PaceUs: 20})
	ticks := func(n int, d time.Duration) {
		for range n {
			rec.tick(false, 0, d, 0, 0)
		}
	}
	ticks(paceWindow-1, 40*time.Microsecond)
	assert.Equal(t, 100, rec.iters(false), "not before a whole window")
	ticks(1, 40*time.Microsecond)
	assert.Equal(t, 80, rec.iters(false), "twice the target: scaled down, by at most paceMaxStep")
	assert.Equal(t, 120_000, rec.iters(true), "the heavy room keeps its ratio")

	ticks(paceWindow/2, 25*time.Microsecond) // the median
	ticks(paceWindow/2-1, 5*time.Millisecond)
	rec.tick(true, 0, 30*time.Millisecond, 0, 0) // heavy ticks do not count
	ticks(1, time.Microsecond)
	assert.Equal(t, 64, rec.iters(false), "a median of 25 µs: 80 x 20/25; preempted ticks do not count")
	assert.Equal(t, int64(64), rec.stats(1, true).Iters)

	fixed := newTickRecorder()
	fixed.setup(RoomSetup{Rooms: 1, Iters: 100})
	for range 2 * paceWindow {
		fixed.tick(false, 0, time.Millisecond, 0, 0)
	}
	assert.Equal(t, 100, fixed.iters(false), "PaceUs 0: fixed")
}
