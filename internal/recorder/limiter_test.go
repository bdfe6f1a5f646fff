package recorder

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLogLimiterBurstThenRate(t *testing.T) {
	l := NewLogLimiter(3, time.Second)
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	for i := range 3 {
		ok, sup := l.Allow(at(0))
		require.True(t, ok, "event %d of the burst", i)
		assert.Zero(t, sup)
	}
	for range 5 { // the burst is spent: suppressed until a token comes back
		ok, _ := l.Allow(at(500 * time.Millisecond))
		assert.False(t, ok)
	}
	ok, sup := l.Allow(at(time.Second))
	require.True(t, ok, "one token a second")
	assert.Equal(t, uint64(5), sup, "the line says how many were left out since the last one")
	ok, _ = l.Allow(at(time.Second + time.Millisecond))
	assert.False(t, ok)

	// After a quiet spell the bucket is full again, but not fuller than burst.
	for i := range 3 {
		ok, sup = l.Allow(at(time.Hour))
		require.True(t, ok, "event %d after an hour", i)
		if i == 0 {
			assert.Equal(t, uint64(1), sup)
		}
	}
	ok, _ = l.Allow(at(time.Hour))
	assert.False(t, ok)
	allowed, suppressed := l.counts()
	assert.Equal(t, uint64(7), allowed)
	assert.Equal(t, uint64(7), suppressed)

	// An event dated before the last one is judged against the same state.
	ok, _ = l.Allow(at(0))
	assert.False(t, ok)
}

func TestLogLimiterOnePerInterval(t *testing.T) {
	l := NewLogLimiter(1, time.Second)
	ok, _ := l.Allow(epoch)
	require.True(t, ok)
	ok, _ = l.Allow(epoch.Add(time.Second - 1))
	require.False(t, ok)
	ok, sup := l.Allow(epoch.Add(time.Second))
	require.True(t, ok)
	assert.Equal(t, uint64(1), sup)
}

func TestLogLimiterRejectsBadArguments(t *testing.T) {
	assert.PanicsWithValue(t, "recorder: NewLogLimiter burst (0) must be at least 1", func() { NewLogLimiter(0, time.Second) })
	assert.PanicsWithValue(t, "recorder: NewLogLimiter every (0s) must be positive", func() { NewLogLimiter(1, 0) })
}

// TestLogLimiterConcurrent checks, under -race, that concurrent callers count every event
// once and that the suppressed counts reported in allowed lines add up.
func TestLogLimiterConcurrent(t *testing.T) {
	l := NewLogLimiter(2, time.Millisecond)
	const workers, events = 4, 1000
	var mu sync.Mutex
	var reported uint64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range events {
				if ok, sup := l.Allow(epoch.Add(time.Duration(w*events+i) * 10 * time.Microsecond)); ok {
					mu.Lock()
					reported += sup
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	allowed, suppressed := l.counts()
	assert.Equal(t, uint64(workers*events), allowed+suppressed)
	assert.NotZero(t, allowed)
	ok, sup := l.Allow(epoch.Add(time.Hour))
	require.True(t, ok)
	assert.Equal(t, suppressed, reported+sup, "every suppressed event is reported by a later line")
}
