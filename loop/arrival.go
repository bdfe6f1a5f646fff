package loop

import "time"

// Arrival time. A request's latency is measured from its arrival, not from when the loop
// got round to reading it: bytes that wait in the kernel while a task holds the loop are
// part of what the client waits, and a figure that starts at the read hides exactly the
// delay a heavy room inflicts on everyone else.
//
// Linux gives TCP receive timestamps (SO_TIMESTAMPING, software RX) only as control
// messages of recvmsg. gnet v2.10.0 reads with read(2) into its own buffer
// (eventloop.read: unix.Read(c.fd, el.buffer)) before it calls OnTraffic, so the
// control messages never reach baton without replacing gnet's read path; the ioctl
// SIOCGSTAMP would cost a system call per read and does not cover TCP. So the arrival time
// is a bound taken from the loop's own turns (arrivalClockLoopTurn), from the clock
// readings the loop already takes at the start and end of every callback:
//
//   - No long callback just ran: the bytes arrived during this epoll batch's wait or
//     collection, so the callback's start (the clock the loop reads anyway) is the arrival,
//     as before. Its error is the time gnet spent on the batch's earlier events: short
//     callbacks, microseconds.
//   - A callback of at least arrivalLongCallback ended recently (a tick, a spinning
//     handler's slice), and this connection was not read since it ended: its bytes may have
//     arrived at any point while it ran, so the arrival is bounded by that callback's start
//     (or by the connection's previous read, if later): the latency recorded is then at most
//     the long callback's length above the truth, never below it. When the long callback
//     followed another one closely (no idle gap, the earlier one not lapsed: a nice task's
//     slices, one per turn), the bound is the earlier one's start: gnet polls epoll
//     level-triggered once per batch of callbacks, so bytes read in a batch arrived after
//     the previous batch was collected, and the earlier long callback may be in that batch.
//     Never further back: bytes that arrived during an older callback were ready at the
//     poll that followed it and were read before the latest one (a long run of slices
//     bounded by its first slice's start recorded seconds for a request that arrived after
//     the run, issue 27). The bound stops applying once the loop idles (bytes read after an
//     idle wait arrived during it) or once as long again as the latest long callback has
//     passed after it (with the loop's utilisation below 1, what arrived during a hold is
//     read within that time).
//
// Idle is a gap between two callbacks of at least a quarter of the long callback (and at
// least arrivalIdleGap). A fixed small gap does not do: on a loaded machine the loop's
// thread, having just computed for tens of milliseconds, is often descheduled for a
// millisecond or more right after (measured: median 45-60 µs, p90 1.3-2 ms between a 30 ms
// tick and the next read), and bytes wait through that too. Taking a gap that short for
// idle would drop the bound exactly when it matters. The price of the longer gap is that
// bytes arriving at an idle loop within that quarter after the long callback get its
// start as their bound; such requests are fewer than a quarter of those that really waited
// behind it, so they cannot move a percentile much past where the real waits put it.
//
// Cost on the hot path: a comparison at the end of each callback, and at each read a
// comparison and two stores; no clock read and no system call is added.

// arrivalClockLoopTurn is the arrival clock in use: a bound from the loop turn in which
// the bytes were read (see the comment above). Shown as arrival_clock on
// /debug/baton/loop.
const arrivalClockLoopTurn = "loop-turn bound"

// arrivalLongCallback is the callback length from which bytes read after it may have
// waited through it: shorter callbacks make an error no larger than themselves, below what
// the route histograms resolve at the latencies that matter.
const arrivalLongCallback = 500 * time.Microsecond

// arrivalIdleGap is the shortest gap between two callbacks taken as the loop having waited
// in epoll: gnet's own work between callbacks (a read, a write, a non-blocking epoll_wait)
// takes a few microseconds on an idle machine.
const arrivalIdleGap = 50 * time.Microsecond

// arrivalBound tracks the latest long callbacks. Loop-confined.
type arrivalBound struct {
	start   int64 // the bound: the start of the long callback before the latest, if it closely preceded it, else the latest's
	cur     int64 // the latest long callback's start
	end     int64 // its end (loop clock); 0: no bound applies
	lastEnd int64 // the end of the latest callback while a bound applies
	bounded uint64
	hidden  int64 // ns: sum over bounded reads of (callback start - arrival)
}

// callbackEnded is busyEnd's report of a callback [start, end), made only when it was
// long or a bound applies. Loop-confined.
func (a *arrivalBound) callbackEnded(start, end int64) {
	if end-start >= int64(arrivalLongCallback) {
		if a.end != 0 && start-a.lastEnd < a.idleGap() && start <= a.expiry() {
			a.start = a.cur // it closely follows the previous long callback: bound by that one
		} else {
			a.start = start
		}
		a.cur, a.end = start, end
	} else if start > a.expiry() {
		a.end = 0 // expired
	}
	a.lastEnd = end
}

// idleGap is the gap between callbacks taken as idle while the bound applies: a quarter of
// the latest long callback, at least arrivalIdleGap.
func (a *arrivalBound) idleGap() int64 { return max(int64(arrivalIdleGap), (a.end-a.cur)/4) }

// expiry is when the bound stops applying: as long again as the latest long callback
// after its end.
func (a *arrivalBound) expiry() int64 { return 2*a.end - a.cur }

// noteRead records a read of cs in the current callback: its arrival bound and the read's
// time. Loop-confined (OnTraffic).
func (s *Server) noteRead(cs *conn) {
	t := s.turnAt
	arr := t
	if a := &s.arr; a.end != 0 && cs.readAt < a.end {
		if t-a.lastEnd >= a.idleGap() || t > a.expiry() {
			a.end = 0 // the loop idled since, or the bound expired
		} else {
			arr = max(a.start, cs.readAt)
			a.bounded++
			a.hidden += t - arr
		}
	}
	cs.arrival, cs.readAt = arr, t
	cs.heard = true
}

// noteOpen starts cs's reads from the turn that registered it (OnOpen), not from nothing:
// its bytes reached the kernel once the connection was accepted, which was at most the
// long callbacks just before the registration ago (it waits in gnet's task queue while
// they run), so its first read is bounded like a later one, by no long callback older than
// those. Loop-confined.
func (s *Server) noteOpen(cs *conn) {
	t := s.now()
	since := t
	if a := &s.arr; a.end != 0 {
		if t-a.lastEnd >= a.idleGap() || t > a.expiry() {
			a.end = 0
		} else {
			since = a.start
		}
	}
	cs.readAt = since
}

// arrivalOf returns the arrival of a request of cs admitted at acceptedAt: the bound of
// the connection's latest read (the one that completed the request), never later than
// acceptedAt. Loop-confined.
func arrivalOf(cs *conn, acceptedAt int64) int64 {
	if a := cs.arrival; a != 0 && a < acceptedAt {
		return a
	}
	return acceptedAt
}
