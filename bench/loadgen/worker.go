package loadgen

import (
	"hash/fnv"
	"net"
	"sync"
	"time"
)

// worker drives one connection (redialling it after failures).
type worker struct {
	r     *run
	gr    *groupRun
	sh    *shard
	id    int
	conn  net.Conn
	rd    *respReader
	wbuf  []byte
	batch []int
	rng   uint64
	timer *time.Timer
	sent  uint64 // requests of the window written; added to the shard at the end
}

func newWorker(r *run, gr *groupRun, id int) *worker {
	h := fnv.New64a()
	h.Write([]byte(gr.g.Name))
	return &worker{
		r: r, gr: gr, sh: gr.shards[id%len(gr.shards)], id: id,
		rd:  newRespReader(nil),
		rng: h.Sum64() ^ (uint64(id)+1)*0x9E3779B97F4A7C15 | 1,
	}
}

// pick draws a mix entry by weight (xorshift64; no allocation, no shared state).
func (w *worker) pick() int {
	cum := w.gr.cum
	if len(cum) == 1 {
		return 0
	}
	w.rng ^= w.rng << 13
	w.rng ^= w.rng >> 7
	w.rng ^= w.rng << 17
	x := w.rng % w.gr.total
	for i, c := range cum {
		if x < c {
			return i
		}
	}
	return len(cum) - 1
}

// dial connects; started says whether the run's times are known (to set the deadline).
func (w *worker) dial(started bool) error {
	select {
	case w.r.dialSem <- struct{}{}:
	case <-w.r.ctx.Done():
		return w.r.ctx.Err()
	}
	c, err := net.DialTimeout("tcp", w.gr.g.Addr, w.r.cfg.DialTimeout)
	<-w.r.dialSem
	if err != nil {
		return err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		// Close with a reset: thousands of connections closed at the end of each run would
		// otherwise leave as many ports in TIME_WAIT.
		_ = tc.SetLinger(0)
	}
	if started {
		_ = c.SetDeadline(w.r.abs(w.r.hard))
	}
	w.conn = c
	w.rd.reset(c)
	return nil
}

func (w *worker) closeConn() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// sleepUntil sleeps until the run time at (ns), returning false if the run was cancelled
// or stop was closed first.
func (w *worker) sleepUntil(at int64, stop <-chan struct{}) bool {
	d := time.Duration(at - w.r.now())
	if d <= 0 {
		return true
	}
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	select {
	case <-w.timer.C:
		return true
	case <-w.r.ctx.Done():
	case <-stop:
	}
	w.timer.Stop()
	return false
}

// record adds one response to the shard.
func (w *worker) record(idx int, latency int64, status int, slop int64) {
	s := w.sh
	s.mu.Lock()
	record(s.byName[w.gr.nameOf[idx]], latency)
	if slop >= 0 {
		record(s.slop, slop)
	}
	if status >= 0 && status < len(s.status) {
		s.status[status]++
	}
	s.received++
	s.mu.Unlock()
}

func (w *worker) main(upfront bool, ready *sync.WaitGroup) {
	defer func() {
		w.closeConn()
		w.sh.mu.Lock()
		w.sh.sent += w.sent
		w.sh.mu.Unlock()
	}()
	g := &w.gr.g
	if upfront {
		if err := w.dial(false); err != nil {
			w.sh.addErr(kConnect, 1)
		} else if g.Mode == Idle {
			w.warmRequest()
		}
		ready.Done()
	}
	select {
	case <-w.r.start:
	case <-w.r.ctx.Done():
		return
	}
	free := w.r.now()
	first := w.r.t0 + int64(w.id)*w.gr.interval/int64(g.Conns) // even spacing over the group
	if w.conn != nil {
		_ = w.conn.SetDeadline(w.r.abs(w.r.hard))
	}
	if g.ConnectSpread > 0 {
		at := w.r.ms + int64(w.id)*int64(g.ConnectSpread)/int64(g.Conns)
		if !w.sleepUntil(at, nil) {
			return
		}
		t := w.r.now()
		if err := w.dial(true); err != nil {
			w.sh.addErr(kConnect, 1)
		} else {
			free = w.r.now()
			w.sh.mu.Lock()
			record(w.sh.connect, free-t)
			w.sh.mu.Unlock()
		}
		first = free // a reconnecting client speaks at once
		if g.Mode == Idle && w.conn != nil {
			w.warmRequest()
		}
	}
	switch {
	case g.Mode == Closed:
		w.closedLoop()
	case g.Mode == Open && g.Pipeline <= 1:
		w.openLoop(first, free)
	case g.Mode == Open:
		w.openPipelined(first)
	case g.Mode == Idle:
		w.idleWait()
	}
}

// warmRequest sends one request whose result is not recorded (Idle set-up).
func (w *worker) warmRequest() {
	i := w.pick()
	if _, err := w.conn.Write(w.gr.g.Mix[i].Raw); err != nil {
		w.sh.addErr(kWrite, 1)
		w.closeConn()
		return
	}
	status, closeConn, err := w.rd.next()
	switch {
	case err != nil:
		w.sh.addErr(errKind(err), 1)
		w.closeConn()
	case closeConn || status/100 != 2:
		w.sh.addErr(kIdleDead, 1)
		w.closeConn()
	}
}

// redial reconnects after a failure, pausing briefly when the connect fails. It returns
// the time the connection became usable, or -1.
func (w *worker) redial(inWindow bool) int64 {
	if err := w.dial(true); err != nil {
		if inWindow {
			w.sh.addErr(kConnect, 1)
		}
		w.sleepUntil(min(w.r.now()+int64(100*time.Millisecond), w.r.me), nil)
		return -1
	}
	return w.r.now()
}

func (w *worker) closedLoop() {
	p := w.gr.g.Pipeline
	mix := w.gr.g.Mix
	for {
		t := w.r.now()
		if t >= w.r.me || w.r.ctx.Err() != nil {
			return
		}
		inWin := t >= w.r.ms
		if w.conn == nil {
			if w.redial(inWin) < 0 {
				continue
			}
			t = w.r.now()
		}
		var err error
		w.batch = w.batch[:0]
		if p == 1 {
			i := w.pick()
			w.batch = append(w.batch, i)
			_, err = w.conn.Write(mix[i].Raw)
		} else {
			w.wbuf = w.wbuf[:0]
			for range p {
				i := w.pick()
				w.batch = append(w.batch, i)
				w.wbuf = append(w.wbuf, mix[i].Raw...)
			}
			_, err = w.conn.Write(w.wbuf)
		}
		if err != nil {
			if inWin {
				w.sh.addErr(kWrite, uint64(p))
			}
			w.closeConn()
			continue
		}
		if inWin {
			w.sent += uint64(p)
		}
		for k, i := range w.batch {
			status, closeConn, err := w.rd.next()
			if err != nil {
				if inWin {
					w.sh.addErr(errKind(err), uint64(p-k))
				}
				w.closeConn()
				break
			}
			if inWin {
				w.record(i, w.r.now()-t, status, -1)
			}
			if closeConn {
				if inWin && k < p-1 {
					w.sh.addErr(kClosed, uint64(p-1-k))
				}
				w.closeConn()
				break
			}
		}
	}
}

// openLoop runs an Open schedule with one request in flight: next is the first due time,
// free when the connection became usable.
func (w *worker) openLoop(next, free int64) {
	interval := w.gr.interval
	mix := w.gr.g.Mix
	for next < w.r.me {
		now := w.r.now()
		if now >= w.r.hard || w.r.ctx.Err() != nil {
			break
		}
		inWin := next >= w.r.ms
		if w.conn == nil {
			if free = w.redial(inWin); free < 0 {
				continue
			}
			now = free
		}
		if now < next {
			if !w.sleepUntil(next, nil) {
				break
			}
			now = w.r.now()
		}
		// The connection was free when the request was due: a late send is the client
		// timer's fault, so latency counts from the send. Otherwise the server kept the
		// connection busy past the due time, and latency counts from the due time.
		start, slop := next, int64(-1)
		if free <= next {
			start, slop = now, now-next
		}
		i := w.pick()
		if _, err := w.conn.Write(mix[i].Raw); err != nil {
			if inWin {
				w.sh.addErr(kWrite, 1)
			}
			w.closeConn()
			free = w.r.now()
			next += interval
			continue
		}
		if inWin {
			w.sent++
		}
		status, closeConn, err := w.rd.next()
		recv := w.r.now()
		free = recv
		switch {
		case err != nil:
			if inWin {
				w.sh.addErr(errKind(err), 1)
			}
			w.closeConn()
		default:
			if inWin {
				w.record(i, recv-start, status, slop)
			}
			if closeConn {
				w.closeConn()
			}
		}
		next += interval
	}
	w.countMissed(next)
}

// countMissed counts the due times from next to the end of the window as missed.
func (w *worker) countMissed(next int64) {
	interval := w.gr.interval
	if next < w.r.ms {
		next += (w.r.ms - next + interval - 1) / interval * interval
	}
	if next < w.r.me {
		w.sh.addErr(kMissed, uint64((w.r.me-next+interval-1)/interval))
	}
}

type flight struct {
	idx   int
	start int64
	slop  int64
	inWin bool
}

// openPipelined runs an Open schedule with up to Pipeline requests in flight: this
// goroutine writes on schedule, a reader goroutine per connection reads.
func (w *worker) openPipelined(next int64) {
	interval := w.gr.interval
	mix := w.gr.g.Mix
	p := w.gr.g.Pipeline
	for next < w.r.me && w.r.now() < w.r.hard && w.r.ctx.Err() == nil {
		if w.conn == nil && w.redial(next >= w.r.ms) < 0 {
			continue
		}
		fifo := make(chan flight, p)
		failed := make(chan struct{})
		exited := make(chan struct{})
		failKind := kClosed
		go w.readLoop(w.conn, fifo, failed, exited, &failKind)

		broken := false
		for next < w.r.me && !broken {
			now := w.r.now()
			if now >= w.r.hard || w.r.ctx.Err() != nil {
				broken = true
				break
			}
			slept := false
			if now < next {
				if !w.sleepUntil(next, failed) {
					broken = true
					break
				}
				slept = true
				now = w.r.now()
			}
			f := flight{idx: w.pick(), start: next, slop: -1, inWin: next >= w.r.ms}
			if slept {
				f.start, f.slop = now, now-next
			}
			select {
			case fifo <- f:
			default: // all slots busy: the server is behind, latency counts from due time
				f.start, f.slop = next, -1
				select {
				case fifo <- f:
				case <-failed:
					broken = true
				}
			}
			if broken {
				break
			}
			if _, err := w.conn.Write(mix[f.idx].Raw); err != nil {
				_ = w.conn.Close() // the reader fails on this request and counts it
				broken = true
				break
			}
			if f.inWin {
				w.sent++
			}
			next += interval
		}
		close(fifo)
		<-exited
		for f := range fifo { // requests the reader never got to
			if f.inWin {
				w.sh.addErr(failKind, 1)
			}
		}
		if broken {
			w.closeConn()
		}
	}
	w.countMissed(next)
}

func (w *worker) readLoop(c net.Conn, fifo <-chan flight, failed, exited chan struct{}, failKind *int) {
	defer close(exited)
	for f := range fifo {
		status, closeConn, err := w.rd.next()
		if err != nil {
			*failKind = errKind(err)
			if f.inWin {
				w.sh.addErr(*failKind, 1)
			}
			_ = c.Close()
			close(failed)
			return
		}
		if f.inWin {
			w.record(f.idx, w.r.now()-f.start, status, f.slop)
		}
		if closeConn {
			*failKind = kClosed
			_ = c.Close()
			close(failed)
			return
		}
	}
}

// idleWait keeps an Idle connection silent until the window has ended, then verifies it.
func (w *worker) idleWait() {
	if !w.sleepUntil(w.r.me, nil) || !w.gr.g.Verify {
		return
	}
	<-w.r.ended
	if w.conn == nil {
		w.sh.addErr(kIdleDead, 1)
		return
	}
	_ = w.conn.SetDeadline(time.Now().Add(w.r.cfg.Drain))
	i := w.pick()
	if _, err := w.conn.Write(w.gr.g.Mix[i].Raw); err != nil {
		w.sh.addErr(kIdleDead, 1)
		return
	}
	status, _, err := w.rd.next()
	if err != nil || status/100 != 2 {
		w.sh.addErr(kIdleDead, 1)
		return
	}
	w.sh.mu.Lock()
	w.sh.alive++
	w.sh.mu.Unlock()
}
