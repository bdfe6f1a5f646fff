package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chainLog records what a chain does, for the tests below.
type chainLog struct {
	stops   []stopRec // every OnStop, in order
	picks   int       // calls of the chain function
	pickGID []uint64  // the goroutine each pick ran on
	ids     []uint64  // task ids seen by the task functions
	gids    []uint64  // the goroutine each task function ran on
}

type stopRec struct {
	id     uint64
	st     State
	rounds uint64
	wait   time.Duration // queue delay so far (Totals)
	onLoop time.Duration
	end    int64 // SliceEnd
}

func newChainSched(t *testing.T, cfg Config, log *chainLog) *Scheduler {
	cfg.Hooks.OnStop = func(tk *Task, st State, _ Reason) {
		on, q, _ := tk.Totals()
		log.stops = append(log.stops, stopRec{id: tk.ID(), st: st, rounds: tk.st.Rounds, wait: q, onLoop: on, end: tk.SliceEnd()})
	}
	return newSync(t, cfg)
}

// chainOf returns a task function that records itself, runs body (if any) and chains to
// the next of n tasks until n have run.
func chainOf(s *Scheduler, log *chainLog, n int, body func(t *Task, i int)) func(*Task) {
	i := 0
	var fn func(*Task)
	pick := func(any) (func(*Task), any, int64) {
		log.picks++
		log.pickGID = append(log.pickGID, goroutineID())
		if i >= n {
			return nil, nil, 0
		}
		return fn, nil, s.Now()
	}
	fn = func(t *Task) {
		log.ids = append(log.ids, t.ID())
		log.gids = append(log.gids, goroutineID())
		k := i
		i++
		if body != nil {
			body(t, k)
		}
		t.Chain(pick, nil)
	}
	return fn
}

// TestChainRunsTasksOnOneCoroutine: a chain of three tasks started by SpawnNowAt runs all
// three inside the call, on one coroutine (the chain function too), each a task of its own
// with one round, and leaves the struct in the idle pool.
func TestChainRunsTasksOnOneCoroutine(t *testing.T) {
	for _, acct := range []bool{true, false} {
		t.Run(map[bool]string{true: "acct=on", false: "acct=off"}[acct], func(t *testing.T) {
			log := &chainLog{}
			s := newChainSched(t, Config{NoAccounting: !acct}, log)
			fn := chainOf(s, log, 3, nil)
			now := s.Now()
			end := s.SpawnNowAt(fn, nil, now, now)

			require.Len(t, log.ids, 3)
			assert.Equal(t, 3, log.picks, "a pick after each task, the last finding none")
			assert.NotEqual(t, log.ids[0], log.ids[1])
			assert.NotEqual(t, log.ids[1], log.ids[2])
			loopG := goroutineID()
			for i, g := range append(log.gids, log.pickGID...) {
				assert.Equal(t, log.gids[0], g, "call %d ran on another goroutine", i)
			}
			assert.NotEqual(t, loopG, log.gids[0], "the tasks ran on a coroutine")
			require.Len(t, log.stops, 3)
			for i, r := range log.stops {
				assert.Equal(t, log.ids[i], r.id)
				assert.Equal(t, Done, r.st)
				assert.Equal(t, uint64(1), r.rounds, "task %d", i)
			}
			c := s.Counters()
			assert.Equal(t, 0, c.Live)
			assert.Equal(t, uint64(3), c.Spawned)
			assert.Equal(t, uint64(3), c.Completed)
			assert.Equal(t, uint64(3), c.Switches, "one slice per task")
			assert.Equal(t, uint64(1), c.Coroutines)
			assert.Equal(t, 1, c.Idle, "the struct went back to the pool")
			assert.Nil(t, s.Current())
			if acct {
				assert.Equal(t, log.stops[2].end, end, "SpawnNowAt returns the last slice's end")
				for i := 1; i < 3; i++ {
					// Each task's slice starts where the one before ended: it waited (ready
					// at pick's reading, before or at the previous end) no less than 0 and
					// its slices do not overlap the previous task's.
					assert.GreaterOrEqual(t, log.stops[i].end-log.stops[i].onLoop.Nanoseconds(), log.stops[i-1].end, "task %d", i)
					assert.GreaterOrEqual(t, log.stops[i].wait, time.Duration(0))
				}
			} else {
				assert.Zero(t, end)
			}

			// The pooled struct serves a plain task afterwards.
			ran := false
			s.SpawnNow(func(*Task) { ran = true }, nil)
			assert.True(t, ran)
			assert.Equal(t, uint64(1), s.Counters().Coroutines)
		})
	}
}

// TestChainMiddleTaskParks: the second task of a chain parks; SpawnNow returns then, the
// third has not run, and once woken and run the second chains to the third from Run.
func TestChainMiddleTaskParks(t *testing.T) {
	log := &chainLog{}
	s := newChainSched(t, Config{}, log)
	var parked *Task
	var parkErr error
	fn := chainOf(s, log, 3, func(tk *Task, i int) {
		if i == 1 {
			parked = tk
			parkErr = tk.Park(ReasonWait)
		}
	})
	s.SpawnNow(fn, nil)
	require.Len(t, log.ids, 2)
	require.NotNil(t, parked)
	assert.Equal(t, Parked, parked.State())
	assert.Equal(t, ReasonWait, parked.Reason())
	c := s.Counters()
	assert.Equal(t, 1, c.Live)
	assert.Equal(t, 1, c.Parked)
	assert.Nil(t, s.Current())
	require.Len(t, log.stops, 2)
	assert.Equal(t, Done, log.stops[0].st)
	assert.Equal(t, Parked, log.stops[1].st)

	s.Wake(parked)
	assert.False(t, s.Run())
	assert.NoError(t, parkErr)
	require.Len(t, log.ids, 3)
	require.Len(t, log.stops, 4)
	assert.Equal(t, Done, log.stops[2].st)
	assert.Equal(t, uint64(2), log.stops[2].rounds, "the parked task: two slices")
	assert.Equal(t, uint64(1), log.stops[3].rounds, "the task chained from Run")
	c = s.Counters()
	assert.Equal(t, 0, c.Live)
	assert.Equal(t, uint64(3), c.Completed)
	assert.Equal(t, uint64(4), c.Switches)
}

// TestChainNotAfterPanic: a task that calls Chain and then panics chains nothing; the
// panic is reported and the loop gets the coroutine back.
func TestChainNotAfterPanic(t *testing.T) {
	var panics []any
	log := &chainLog{}
	s := newChainSched(t, Config{OnPanic: func(_ *Task, v any, _ []byte) { panics = append(panics, v) }}, log)
	picked := false
	pick := func(any) (func(*Task), any, int64) { picked = true; return nop, nil, 0 }
	s.SpawnNow(func(t *Task) {
		t.Chain(pick, nil)
		panic("boom")
	}, nil)
	assert.False(t, picked)
	assert.Equal(t, []any{"boom"}, panics)
	require.Len(t, log.stops, 1)
	assert.Equal(t, Done, log.stops[0].st)
	assert.Equal(t, 0, s.Counters().Live)

	// The coroutine is reused and chains normally.
	fn := chainOf(s, log, 2, nil)
	s.SpawnNow(fn, nil)
	assert.Len(t, log.ids, 2)
	assert.Equal(t, uint64(1), s.Counters().Coroutines)
}

// TestChainPickArgAndReady: pick gets Chain's arg, the next task gets pick's arg, and its
// queue delay runs from the reading pick returned to the previous slice's end.
func TestChainPickArgAndReady(t *testing.T) {
	log := &chainLog{}
	s := newChainSched(t, Config{}, log)
	var gotArg, gotNext any
	var ready int64
	second := func(t *Task) { gotNext = t.Arg() }
	pick := func(a any) (func(*Task), any, int64) {
		gotArg = a
		return second, "next", ready
	}
	ready = s.Now()
	for s.Now() == ready { // let the clock move, so the queue delay is not 0
	}
	s.SpawnNow(func(t *Task) { t.Chain(pick, "arg") }, nil)
	assert.Equal(t, "arg", gotArg)
	assert.Equal(t, "next", gotNext)
	require.Len(t, log.stops, 2)
	assert.Equal(t, time.Duration(log.stops[0].end-ready), log.stops[1].wait,
		"ready at pick's reading, running from the previous slice's end")
}

// TestChainCalledOutsideTask: Chain is task only.
func TestChainCalledOutsideTask(t *testing.T) {
	s := newSync(t, Config{})
	var tk *Task
	s.Go(func(t *Task) { tk = t; _ = t.Park(ReasonOther) })
	s.Run()
	assert.Panics(t, func() { tk.Chain(func(any) (func(*Task), any, int64) { return nil, nil, 0 }, nil) })
}
