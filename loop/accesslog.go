package loop

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RequestRecord is what Config.OnRequestDone receives when a request finishes: one line of
// an access log. It is filled on the loop and valid only during the call (the server
// reuses it, and Path views the request's buffer): copy the record, and the path with
// strings.Clone, to keep them.
type RequestRecord struct {
	Time    time.Time     // the request's arrival (a bound from the loop turn that read it: docs/health.md), its start
	Method  string        // "GET", ...
	Route   string        // the matched route pattern, "" when none matched (404, 405, 503 while draining)
	Path    string        // the path as sent, without the query; valid only during the call
	Status  int           // the response status (503 when the handler deadline answered for it)
	Bytes   int64         // response bytes written to the connection, head included
	Latency time.Duration // from Time to the response complete
	OnLoop  time.Duration // time the handler ran (on the loop, or its goroutine's stretches in multi-thread mode)
	Queue   time.Duration // time waiting to run: admission queue and ready queue
	Parked  time.Duration // time parked (sleeping, waiting, offloaded, backpressure, admission queue)
	Rounds  uint64        // times the handler was scheduled
	Remote  net.Addr      // the client's address
	TaskID  uint64        // the handler's task id, 0 when no handler ran
}

// requestDone fills a record for c, which finished at now (loop clock), and calls the
// hook. Loop-confined.
func (s *Server) requestDone(c *Ctx, now int64) {
	r := &s.eco.rec // reused: the record is valid only during the call
	*r = RequestRecord{
		Method: c.Method(), Route: c.pattern, Path: unsafeString(c.req.Path), Status: c.status,
		Bytes: c.bytesOut, Remote: c.remote, TaskID: c.Task.idOrZero(),
	}
	if c.headState() == headServer {
		r.Status = 503
	}
	if c.acceptedAt != 0 { // arrivedAt is set with it (arrival.go): the route figures' start
		r.Time = s.timeAt(c.arrivedAt)
		r.Latency = time.Duration(now - c.arrivedAt)
	} else {
		r.Time = s.timeAt(now)
	}
	switch {
	case c.Task.t != nil:
		st := c.Task.t.StatsAt(now)
		r.OnLoop, r.Queue, r.Parked, r.Rounds = st.OnLoop, st.QueueDelay, st.ParkedTotal(), st.Rounds
	case c.Task.g != nil:
		st := c.Task.g.stats(&c.Task)
		r.OnLoop, r.Queue, r.Parked, r.Rounds = st.OnLoop, st.QueueDelay, st.ParkedTotal(), st.Rounds
	}
	r.Queue += c.queueWait
	r.Parked += c.queueWait
	s.cfg.OnRequestDone(r)
}

// AccessLogOptions configures NewAccessLogger. Its zero value logs every request through a
// buffer of DefaultAccessLogBuffer records.
type AccessLogOptions struct {
	// SampleEvery logs one request in SampleEvery (counting every request, in order);
	// requests with a status of 500 or more are always logged. Zero or one logs every
	// request.
	SampleEvery int
	// Buffer is how many records may wait for the writer goroutine, which drains them
	// every 50 ms; when it is full a record is dropped and counted (AccessLogger.Dropped),
	// so a slow log never slows the loop. Zero means DefaultAccessLogBuffer.
	Buffer int
	// Level is the level records are logged at. Default slog.LevelInfo.
	Level slog.Level
}

// DefaultAccessLogBuffer holds 4096 records (a few hundred KiB): 50 ms of 80,000 logged
// requests per second, with room for the writer to be momentarily slow.
const DefaultAccessLogBuffer = 4096

// AccessLogger writes an access log line per request (or per sampled request) to a
// slog.Logger from a goroutine of its own, which drains the buffer every 50 ms. Install its Record method as
// Config.OnRequestDone; Close it after the server has stopped.
type AccessLogger struct {
	l       *slog.Logger
	level   slog.Level
	every   uint64
	n       uint64 // requests seen; loop-owned (Record)
	ch      chan accessEntry
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed when the writer has finished
	closing sync.Once
	logged  atomic.Uint64
	dropped atomic.Uint64
}

// accessEntry is a record with its path owned by the entry (the remote address is an
// immutable net.Addr: formatted by the writer, off the loop).
type accessEntry struct {
	RequestRecord
}

// NewAccessLogger starts an access logger writing to l (Validate-style errors name the
// options field). Any goroutine.
func NewAccessLogger(l *slog.Logger, opts AccessLogOptions) (*AccessLogger, error) {
	if l == nil {
		return nil, fmt.Errorf("loop: NewAccessLogger: nil logger")
	}
	if opts.SampleEvery < 0 {
		return nil, fmt.Errorf("loop: AccessLogOptions.SampleEvery must not be negative, got %d", opts.SampleEvery)
	}
	if opts.Buffer < 0 {
		return nil, fmt.Errorf("loop: AccessLogOptions.Buffer must not be negative, got %d", opts.Buffer)
	}
	if opts.Buffer == 0 {
		opts.Buffer = DefaultAccessLogBuffer
	}
	a := &AccessLogger{l: l, level: opts.Level, every: uint64(max(opts.SampleEvery, 1)),
		ch: make(chan accessEntry, opts.Buffer), stop: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a, nil
}

// Record is the Config.OnRequestDone hook: it samples r and queues a copy for the writer
// goroutine, or drops it (counted) when the buffer is full. It never blocks. Call it from
// one goroutine at a time (the loop, as the hook is).
func (a *AccessLogger) Record(r *RequestRecord) {
	a.n++
	if a.n%a.every != 0 && r.Status < 500 {
		return
	}
	e := accessEntry{RequestRecord: *r}
	e.Path = strings.Clone(r.Path)
	select {
	case a.ch <- e:
	default:
		a.dropped.Add(1)
	}
}

// accessLogEvery is how often the writer goroutine drains the buffer. It polls rather than
// waiting on the channel so that Record never wakes a goroutine: a wake-up costs the loop
// microseconds (a futex call), many times the rest of Record. Log lines are therefore up to
// this late, and the buffer must hold this long's worth of records.
const accessLogEvery = 50 * time.Millisecond

// run writes the queued records every accessLogEvery until Close, then the rest.
func (a *AccessLogger) run() {
	defer close(a.done)
	tick := time.NewTicker(accessLogEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			a.drain()
		case <-a.stop:
			a.drain()
			return
		}
	}
}

// drain writes every record queued now.
func (a *AccessLogger) drain() {
	ctx := context.Background()
	for {
		var e accessEntry
		select {
		case e = <-a.ch:
		default:
			return
		}
		a.l.LogAttrs(ctx, a.level, "request",
			slog.Time("start", e.Time),
			slog.String("method", e.Method),
			slog.String("route", e.Route),
			slog.String("path", e.Path),
			slog.Int("status", e.Status),
			slog.Int64("bytes", e.Bytes),
			slog.Duration("latency", e.Latency),
			slog.Duration("on_loop", e.OnLoop),
			slog.Duration("queue", e.Queue),
			slog.Duration("parked", e.Parked),
			slog.Uint64("rounds", e.Rounds),
			slog.String("remote", addrString(e.Remote)),
			slog.Uint64("task", e.TaskID),
		)
		a.logged.Add(1)
	}
}

// Close stops the writer goroutine once it has written the records queued so far. Call it
// after the server has stopped: records passed to Record later are not written. Any
// goroutine; later calls return at once.
func (a *AccessLogger) Close() {
	a.closing.Do(func() { close(a.stop) })
	<-a.done
}

// Logged returns how many records were written. Any goroutine.
func (a *AccessLogger) Logged() uint64 { return a.logged.Load() }

// Dropped returns how many sampled records were dropped because the buffer was full. Any
// goroutine.
func (a *AccessLogger) Dropped() uint64 { return a.dropped.Load() }

// addrString formats an address, "" for none.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
