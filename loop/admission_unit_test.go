package loop

import (
	"testing"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// admission is driven with a fake clock: the service times are the differences of
// readings the test makes up.
func TestAdmissionSlotsQueueRefusals(t *testing.T) {
	a := newAdmission(2, 1)
	c1, c2, c3, c4 := &Ctx{}, &Ctx{}, &Ctx{}, &Ctx{}
	require.Equal(t, admitNow, a.arrive(c1))
	require.Equal(t, admitNow, a.arrive(c2))
	require.Equal(t, admitQueued, a.arrive(c3))
	require.Equal(t, admitRefused, a.arrive(c4))
	require.Equal(t, 1, a.retryAfter(), "no service time measured yet: 1 s")
	// The oldest queued request gets the freed slot.
	require.Same(t, c3, a.finish(int64(time.Second)))
	require.Nil(t, a.finish(int64(time.Second)))
	st := a.stats()
	assert.Equal(t, accounting.AdmissionStats{Limit: 2, QueueLimit: 1, Active: 1, Queued: 0, AdmittedTotal: 3, QueuedTotal: 1,
		RefusedTotal: 1, MeanServiceSeconds: 1, RetryAfterSeconds: 1}, st)
}

func TestAdmissionRemoveLeavesOrder(t *testing.T) {
	a := newAdmission(1, 3)
	cs := []*Ctx{{}, {}, {}, {}}
	for _, c := range cs {
		a.arrive(c)
	}
	require.True(t, a.remove(cs[2]))
	require.False(t, a.remove(cs[2]))
	require.Same(t, cs[1], a.finish(1))
	require.Same(t, cs[3], a.finish(1))
}

// Retry-After follows the queue ahead and the measured service time of admitted requests:
// (queued+1) × service / slots, rounded up, within [1, 60].
func TestAdmissionRetryAfterFromServiceTime(t *testing.T) {
	a := newAdmission(4, 200)
	for i := 0; i < 4; i++ {
		a.arrive(&Ctx{})
	}
	for i := 0; i < 200; i++ { // a steady 2 s per request
		require.Nil(t, a.finish(int64(2*time.Second)))
		a.arrive(&Ctx{})
	}
	for i := 0; i < 10; i++ {
		require.Equal(t, admitQueued, a.arrive(&Ctx{}))
	}
	// 10 queued ahead, itself the 11th, 4 slots, 2 s each: 5.5 s, so 6.
	require.Equal(t, 6, a.retryAfter())
	// An idle period does not inflate the estimate: nothing finishes, nothing changes.
	require.Equal(t, 6, a.retryAfter())
	// Far more queued than a minute's worth: capped.
	for i := 0; i < 120; i++ {
		a.arrive(&Ctx{})
	}
	require.Equal(t, retryAfterMax, a.retryAfter())
}

// Fast service gives 1 s, never 0, and a service-time change moves the estimate within a
// few dozen requests.
func TestAdmissionRetryAfterFollowsChange(t *testing.T) {
	a := newAdmission(1, 10)
	a.arrive(&Ctx{})
	for i := 0; i < 100; i++ {
		a.finish(int64(time.Millisecond))
		a.arrive(&Ctx{})
	}
	require.Equal(t, 1, a.retryAfter())
	for i := 0; i < 100; i++ {
		a.finish(int64(3 * time.Second))
		a.arrive(&Ctx{})
	}
	require.Equal(t, 3, a.retryAfter())
}
