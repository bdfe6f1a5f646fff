package recorder

import (
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/hdr"
	"github.com/batonrt/baton/internal/render"
)

const nsPerSec = int64(time.Second)

// Loop records the health of the event loop: how busy it is, how long ready tasks wait,
// how deep the ready queue gets, how often it switches and how many tasks live. Its
// recording methods neither lock nor allocate. Loop-confined: call only from the loop
// goroutine.
//
// Busy time is kept in one-second buckets (a ring of 64) indexed by the second since
// Config.Epoch, so utilisation over the last 1, 10 and 60 complete seconds is the busy time
// in those buckets over the elapsed time they cover.
type Loop struct {
	// Written at every slice or busy interval: kept together, in two cache lines.
	switches  uint64
	pending   uint64 // switches since the last Busy, not yet in a bucket
	npend     int
	slowSlice time.Duration         // cfg.SlowSlice
	slices    accounting.SliceStats // slice lengths (Count unused: it is switches)
	busy      int64                 // total busy ns
	readyNow  int
	readyMax  int
	started   uint64
	completed uint64
	seen      uint64 // the count passed to Switched last

	pendLag [sliceBatch]int64 // slices' waits not yet in lag
	cfg     Config
	start   int64 // NewLoop's now, ns since Epoch
	secs    [loopRingSeconds]secBucket
	lag     hdr.Recorder // ready -> running wait per slice, since the last fold
	lagCum  store        // lag, folded every second (a hist's counters are 32-bit)

	watchdog *Watchdog

	// The bucket the latest interval fell in, and its second's bounds [curFrom, curTo), so
	// that an interval within the same second (nearly all of them) costs no division.
	cur            *secBucket
	curFrom, curTo int64
}

// secBucket is one second of the loop: which second it is, busy ns and switches in it.
type secBucket struct {
	sec      int64
	busy     int64
	switches uint64
}

// NewLoop returns a loop recorder that starts at now (its uptime origin; also the Epoch
// when cfg.Epoch is zero). It panics if cfg.validate fails. Any goroutine (the recorder
// then belongs to the loop).
func NewLoop(cfg Config, now time.Time) *Loop {
	cfg.mustValidate()
	cfg = cfg.withDefaults(now)
	lay := cfg.layout()
	l := &Loop{cfg: cfg, start: since(cfg.Epoch, now), lag: hdr.NewRecorder(lay), lagCum: newStore(lay), slowSlice: cfg.SlowSlice}
	for i := range l.secs {
		l.secs[i].sec = -1 // no second yet
	}
	l.curFrom, l.curTo = 1, 0 // no interval fits until Busy has found a bucket
	return l
}

// AttachWatchdog makes Snapshot include w's stall figures (nil detaches). Loop-confined.
func (l *Loop) AttachWatchdog(w *Watchdog) { l.watchdog = w }

// Busy records a busy interval of the loop, [start, end) in ns since Config.Epoch: the loop
// ran a gnet callback or a door batch (and the tasks run from it). Idle is the rest, the
// time in epoll. Switches counted by slice or Switched since the previous Busy are
// attributed to the second in which this interval ends. It does not allocate. Loop-confined.
func (l *Loop) Busy(start, end int64) {
	if end <= start {
		return
	}
	l.busy += end - start
	if start >= l.curFrom && end <= l.curTo {
		// The usual case: microseconds within the second of the interval before.
		b := l.cur
		b.busy += end - start
		b.switches += l.pending
		l.pending = 0
		return
	}
	if sec := start / nsPerSec; start >= 0 && sec == (end-1)/nsPerSec {
		// An interval within one second.
		b := l.bucket(sec)
		l.cur, l.curFrom, l.curTo = b, sec*nsPerSec, (sec+1)*nsPerSec
		b.busy += end - start
		b.switches += l.pending
		l.pending = 0
		return
	}
	l.curFrom, l.curTo = 1, 0                           // the buckets below may reuse cur's slot
	start = max(start, end-loopRingSeconds*nsPerSec, 0) // older parts would fall off the ring
	for t := start; t < end; {
		sec := t / nsPerSec
		seg := min(end, (sec+1)*nsPerSec)
		l.bucket(sec).busy += seg - t
		t = seg
	}
	if l.pending != 0 {
		l.bucket(max(end-1, 0) / nsPerSec).switches += l.pending
		l.pending = 0
	}
}

// bucket returns the bucket of second sec, clearing it if it held an older second. A new
// second also folds the lag histogram into its store.
func (l *Loop) bucket(sec int64) *secBucket {
	b := &l.secs[sec&(loopRingSeconds-1)]
	if b.sec != sec {
		*b = secBucket{sec: sec}
		l.fold()
	}
	return b
}

// fold records the batched slices and moves the recorders into the stores.
func (l *Loop) fold() {
	l.flush()
	l.lagCum.add(&l.lag)
	l.lag.Reset()
}

// slice records that one task slice ran: the switch count, the time the task waited ready
// before it (the loop lag, into a histogram) and the slice's length (into SliceStats). It
// does not allocate. Loop-confined.
func (l *Loop) slice(wait, run time.Duration) {
	l.switches++
	l.pending++
	l.pendLag[l.npend] = int64(wait)
	sl := &l.slices // its Count is switches, filled in by Snapshot
	sl.Total += run
	sl.Max = max(sl.Max, run)
	if run > l.slowSlice {
		sl.Slow++
		sl.SlowTotal += run
	}
	if l.npend++; l.npend == sliceBatch {
		l.flush()
	}
}

// Slices records many slices at once, for a scheduler that gathers their figures itself
// to spare a call per slice: their waits (ready to running, ns) into the lag histogram,
// and st, the totals of their lengths (st.Count is ignored). Unlike slice it does not
// count switches: such a scheduler counts them too, and reports its count with Switched.
// It does not allocate. Loop-confined.
func (l *Loop) Slices(waits []int64, st accounting.SliceStats) {
	sl := &l.slices
	sl.Total += st.Total
	sl.Max = max(sl.Max, st.Max)
	sl.Slow += st.Slow
	sl.SlowTotal += st.SlowTotal
	for len(waits) > 0 {
		n := copy(l.pendLag[l.npend:], waits)
		waits = waits[n:]
		if l.npend += n; l.npend == sliceBatch {
			l.flush()
		}
	}
}

// Switched records the number of slices a scheduler has run so far (a count that only
// grows): those since the previous call are switches, attributed like slice's to the
// second of the next Busy interval. Loop-confined.
func (l *Loop) Switched(total uint64) {
	d := total - l.seen
	l.seen = total
	l.switches += d
	l.pending += d
}

// sliceBatch is how many slices' lags Loop batches before recording them into its
// histogram, for the reason routes batch finished requests: 256 values, 2 KiB.
const sliceBatch = 256

// flush records the batched slices.
func (l *Loop) flush() {
	l.lag.RecordAll(l.pendLag[:l.npend])
	l.npend = 0
}

// ReadyDepth records a sample of the ready-queue depth: the current value and the maximum.
// Loop-confined.
func (l *Loop) ReadyDepth(n int) {
	l.readyNow = n
	l.readyMax = max(l.readyMax, n)
}

// TaskStarted records that a task was spawned (live + 1). Loop-confined.
func (l *Loop) TaskStarted() { l.started++ }

// TaskFinished records that a task finished (live - 1, completed + 1). Loop-confined.
func (l *Loop) TaskFinished() { l.completed++ }

// Snapshot returns the loop's figures at now. It allocates (and, when a watchdog is
// attached, takes its mutex briefly). Loop-confined.
func (l *Loop) Snapshot(now time.Time) accounting.LoopSnapshot {
	ns := since(l.cfg.Epoch, now)
	l.fold()
	s := accounting.LoopSnapshot{
		Uptime:        time.Duration(max(ns-l.start, 0)),
		BusyTotal:     time.Duration(l.busy),
		Lag:           l.lagCum.summary(),
		Slices:        l.slices,
		ReadyDepth:    l.readyNow,
		ReadyDepthMax: l.readyMax,
		Switches:      l.switches,
		TasksStarted:  l.started,
		TasksDone:     l.completed,
	}
	s.Slices.Count = l.switches
	for i, w := range accounting.UtilisationWindows {
		busy, _, elapsed := l.window(ns, int64(w/time.Second))
		s.Utilisation[i] = accounting.Window{Length: w, Busy: time.Duration(busy), Elapsed: time.Duration(elapsed)}
	}
	_, sw, elapsed := l.window(ns, int64(render.SwitchRateWindow/time.Second))
	s.SwitchRate = accounting.SwitchRate{Switches: sw, Elapsed: time.Duration(elapsed)}
	if l.watchdog != nil {
		st := l.watchdog.Stats()
		s.Stalls = &st
	}
	return s
}

// window sums the last n complete seconds before now: busy ns, switches, and the elapsed
// ns they cover (less when the loop started within them).
func (l *Loop) window(now, n int64) (busy int64, switches uint64, elapsed int64) {
	cur := now / nsPerSec // the current, incomplete second
	from := max((cur-n)*nsPerSec, l.start)
	to := cur * nsPerSec
	if to <= from {
		return 0, 0, 0
	}
	for sec := cur - n; sec < cur; sec++ {
		if sec < 0 {
			continue
		}
		if b := &l.secs[sec&(loopRingSeconds-1)]; b.sec == sec {
			busy += b.busy
			switches += b.switches
		}
	}
	return min(busy, to-from), switches, to - from
}

// Window returns the loop's busy time over the last complete seconds of length (whole
// seconds, at most the ring's 64) before now: the figure behind a Snapshot's Utilisation,
// without the rest of a snapshot, for a check polled often (a readiness probe). It does
// not allocate. Loop-confined.
func (l *Loop) Window(now time.Time, length time.Duration) accounting.Window {
	n := min(max(int64(length/time.Second), 1), loopRingSeconds)
	busy, _, elapsed := l.window(since(l.cfg.Epoch, now), n)
	return accounting.Window{Length: time.Duration(n) * time.Second, Busy: time.Duration(busy), Elapsed: time.Duration(elapsed)}
}
