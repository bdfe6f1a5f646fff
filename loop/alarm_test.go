package loop

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrt/baton/internal/scheduler"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAlarmDefault: the timerfd alarm (with its slack) is the default; RuntimeTimers leaves
// the scheduler its runtime timer and no slack.
func TestAlarmDefault(t *testing.T) {
	assert.NotNil(t, alarmFor(Config{}), "default: the loop's alarm")
	assert.Equal(t, timerSlack, slackFor(Config{}))
	assert.Nil(t, alarmFor(Config{RuntimeTimers: true}), "RuntimeTimers: the scheduler's runtime timer")
	assert.Zero(t, slackFor(Config{RuntimeTimers: true}))
}

// deadAlarm never goes off; it counts its settings.
type deadAlarm struct{ armed *atomic.Int64 }

func (a deadAlarm) Arm(time.Duration) { a.armed.Add(1) }
func (a deadAlarm) Close()            {}

// TestDueTimerFiresOnTrafficTurn: a timer that fell due while the loop served input fires
// at the end of that input's callback, not only when the alarm goes off. The alarm here
// never does, and nothing else turns the loop, so only the request can wake the sleeper.
// The slack is a minute, so that the timer is not "more than a slack late" (left to the
// alarm) however slow the machine.
func TestDueTimerFiresOnTrafficTurn(t *testing.T) {
	var armed atomic.Int64
	savedAlarm, savedSlack := newAlarm, timerSlack
	t.Cleanup(func() { newAlarm, timerSlack = savedAlarm, savedSlack })
	newAlarm = func(func(), bool) scheduler.Alarm { return deadAlarm{&armed} }
	timerSlack = time.Minute

	s, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /ping", func(c *Ctx) { c.String(200, "pong") })
	})
	asleep, woke := make(chan time.Time, 1), make(chan time.Time, 1)
	s.Loop(0).Go("sleeper", func(tk *Task) {
		asleep <- time.Now()
		if tk.Sleep(time.Millisecond) == nil {
			woke <- time.Now()
		}
	})
	slept := <-asleep
	require.Eventually(t, func() bool { return armed.Load() > 0 }, 10*time.Second, time.Millisecond,
		"the sleeper's timer never armed the alarm")
	for time.Since(slept) < 5*time.Millisecond { // let the deadline pass with the loop idle
		time.Sleep(time.Millisecond)
	}
	select {
	case <-woke:
		require.FailNow(t, "the sleeper woke with no alarm and no traffic")
	default:
	}

	c := dial(t, addr)
	resp, body := c.get("/ping")
	mustStatus(t, resp, 200)
	assert.Equal(t, "pong", body)
	select {
	case at := <-woke:
		assert.GreaterOrEqual(t, at.Sub(slept), time.Millisecond, "woke before its deadline")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the due timer did not fire after the request's callback")
	}
}
