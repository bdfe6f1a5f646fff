package recorder

import (
	"fmt"
	"time"

	"github.com/batonrt/baton/internal/hdr"
)

// Defaults. Each is used when the corresponding Config or WatchdogConfig field is zero.
const (
	// DefaultRecentWindow is the length of one window of the per-route "recent" view. Ten
	// seconds holds enough requests at modest rates for a meaningful p99, yet a regression
	// shows within seconds; the recent view spans one to two windows (see Route).
	DefaultRecentWindow = 10 * time.Second

	// defaultHistogramMax is the largest value a histogram tracks; larger values are
	// recorded as this value (the exact maximum is still kept beside the histogram). A
	// request held for an hour is a stream or a bug, its exact length no longer matters,
	// and each doubling of the range costs one more bucket row.
	defaultHistogramMax = time.Hour

	// defaultSlowSlice is the default Config.SlowSlice: as in tokio-metrics, and as the
	// scheduler's default.
	defaultSlowSlice = 50 * time.Microsecond

	// defaultHistogramDigits is the number of significant decimal digits of the HDR
	// histograms: 2 gives 1% relative error, enough to tell p99 from p999, at about 37 KiB
	// per histogram over 1 ns..1 h (3 digits would cost about 8 times as much; a route
	// keeps 12 histograms).
	defaultHistogramDigits = 2

	// defaultRingSize is the number of recently finished tasks a Ring keeps: a few seconds
	// of traffic on a busy server, enough to still see a short request that was slow, and
	// small enough (about 100 KiB of TaskSample values) to render in one page.
	defaultRingSize = 256

	// defaultStallThreshold is how long a slice may hold the loop before the Watchdog calls
	// it a stall: 100 ms is far beyond any healthy slice (they take microseconds) and below
	// what a user notices as a hang.
	defaultStallThreshold = 100 * time.Millisecond

	// defaultStallPollDivisor divides the threshold to give the default poll interval: the
	// watchdog notices a stall at most threshold/4 late and its final observed duration is
	// at most that short of the truth, for four cheap probe calls per threshold.
	defaultStallPollDivisor = 4

	// defaultStallLogEvery rate-limits stall log lines: at most one per second, so a loop
	// that stalls continuously cannot flood the log (every stall is still counted).
	defaultStallLogEvery = time.Second

	// minStallPoll is the shortest poll interval a tiny threshold can give: each poll
	// wakes a goroutine, and a stall shorter than a millisecond is not worth a core.
	minStallPoll = time.Millisecond
)

// loopRingSeconds is the number of one-second buckets a Loop keeps: the 60 complete seconds
// of the longest window (accounting.UtilisationWindows), the current second, and spare
// slots; a power of two so the index is a mask.
const loopRingSeconds = 64

// Config configures the loop-confined recorders (Routes and Loop). The zero value is
// ready to use: zero fields take the defaults named below. validate reports fields that are
// invalid rather than correcting them.
type Config struct {
	// Epoch is the origin of the int64 nanosecond timestamps passed to the hot-path
	// methods (Route.finishAt, Loop.Busy): pass the scheduler's Epoch so its clock readings
	// can be used directly. Zero: the time NewRoutes or NewLoop is called (so give both
	// the same Epoch if you compare their timestamps).
	Epoch time.Time

	// RecentWindow is the length of one window of the per-route recent view (default
	// DefaultRecentWindow).
	RecentWindow time.Duration

	// HistogramMax is the largest value histograms track (default defaultHistogramMax; at
	// least minHistogramMax).
	HistogramMax time.Duration

	// HistogramDigits is the histograms' significant decimal digits, 1 to
	// hdr.MaxDigits (default defaultHistogramDigits).
	HistogramDigits int

	// SlowSlice is the length above which Loop counts a slice as slow (default
	// defaultSlowSlice).
	SlowSlice time.Duration
}

// Limits of Config's fields.
const (
	// minHistogramMax is the smallest Config.HistogramMax: the figures are durations of
	// slices and requests, and a shorter range would put nearly all of them at the top.
	minHistogramMax = time.Microsecond
)

// validate reports the first invalid field, naming it; nil when c is usable (zero fields
// take their defaults). NewRoutes and NewLoop panic on a Config that does not validate.
// Any goroutine.
func (c Config) validate() error {
	switch {
	case c.RecentWindow < 0:
		return fmt.Errorf("recorder: Config.RecentWindow (%v) must not be negative", c.RecentWindow)
	case c.HistogramMax < 0 || (c.HistogramMax > 0 && c.HistogramMax < minHistogramMax):
		return fmt.Errorf("recorder: Config.HistogramMax (%v) must be 0 (default %v) or at least %v",
			c.HistogramMax, defaultHistogramMax, minHistogramMax)
	case c.HistogramDigits < 0 || c.HistogramDigits > hdr.MaxDigits:
		return fmt.Errorf("recorder: Config.HistogramDigits (%d) must be 0 (default %d) or 1 to %d",
			c.HistogramDigits, defaultHistogramDigits, hdr.MaxDigits)
	case c.SlowSlice < 0:
		return fmt.Errorf("recorder: Config.SlowSlice (%v) must not be negative", c.SlowSlice)
	}
	return nil
}

// mustValidate panics with c's validate error (a programming error).
func (c Config) mustValidate() {
	if err := c.validate(); err != nil {
		panic(err)
	}
}

// withDefaults fills zero fields; now is the Epoch when none is given.
func (c Config) withDefaults(now time.Time) Config {
	if c.Epoch.IsZero() {
		c.Epoch = now
	}
	if c.RecentWindow == 0 {
		c.RecentWindow = DefaultRecentWindow
	}
	if c.HistogramMax == 0 {
		c.HistogramMax = defaultHistogramMax
	}
	if c.HistogramDigits <= 0 {
		c.HistogramDigits = defaultHistogramDigits
	}
	if c.SlowSlice == 0 {
		c.SlowSlice = defaultSlowSlice
	}
	return c
}

// layout returns the bucket layout of the histograms of a Config with defaults applied.
func (c Config) layout() *hdr.Layout { return hdr.NewLayout(int64(c.HistogramMax), c.HistogramDigits) }

// since returns t as nanoseconds since epoch (monotonic when both carry a reading).
func since(epoch, t time.Time) int64 { return int64(t.Sub(epoch)) }
