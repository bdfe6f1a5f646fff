// Package accesslog writes an access log line per request (or per sampled request) to a
// slog.Logger, from a goroutine of its own so that the loop never waits for the log.
//
// Install Logger.Record as loop.Config.OnRequestDone; Close the Logger after the server
// has stopped. To log each request's id (package loop/requestid), set Options.RequestID
// and mount Logger.Middleware with the request id's middleware.
package accesslog

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
)

// Options configures New. Its zero value logs every request through a
// buffer of DefaultBuffer records.
type Options struct {
	// SampleEvery logs one request in SampleEvery (counting every request, in order);
	// requests with a status of 500 or more are always logged. Zero or one logs every
	// request.
	SampleEvery int
	// Buffer is how many records may wait for the writer goroutine, which drains them
	// every 50 ms; when it is full a record is dropped and counted (Logger.Dropped),
	// so a slow log never slows the loop. Zero means DefaultBuffer.
	Buffer int
	// Level is the level records are logged at. Default slog.LevelInfo.
	Level slog.Level
	// RequestID, if set, adds a request_id attribute to each line: Logger.Middleware calls
	// it on the request's handler task (requestid.Get, or the application's own) and
	// Record logs what it returned. Lines of requests the middleware did not see (404,
	// 405, 503 while draining, routes outside it) have no request_id. Default nil: no
	// attribute, and Middleware does nothing.
	RequestID func(*loop.Ctx) string
}

// DefaultBuffer holds 4096 records (a few hundred KiB): 50 ms of 80,000 logged
// requests per second, with room for the writer to be momentarily slow.
const DefaultBuffer = 4096

// Logger writes an access log line per request (or per sampled request) to a
// slog.Logger from a goroutine of its own, which drains the buffer every 50 ms. Install its Record method as
// loop.Config.OnRequestDone; Close it after the server has stopped.
type Logger struct {
	l       *slog.Logger
	level   slog.Level
	every   uint64
	n       atomic.Uint64 // requests seen (Record, on every loop of the server)
	ch      chan accessEntry
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed when the writer has finished
	closing sync.Once
	logged  atomic.Uint64
	dropped atomic.Uint64

	// reqID is Options.RequestID. ids holds the ids Middleware noted until Record takes
	// them: Middleware runs on handler tasks (goroutines in multi-thread mode), Record on
	// the loops, hence the lock.
	reqID func(*loop.Ctx) string
	mu    sync.Mutex
	ids   map[idKey]string
}

// idKey names a request in flight to both Middleware and Record. A task id alone does not:
// each loop numbers its tasks, so two loops run tasks of the same id at once. The client
// address is the connection's (or, behind a trusted proxy, the request's) *net.TCPAddr,
// compared by identity: a connection's requests run one at a time on one loop, where task
// ids are unique.
type idKey struct {
	task   uint64
	remote net.Addr
}

// keyOf returns the key of a request from its task id and client address. Addresses are
// kept only when they are pointers (comparable, and compared by identity), so that no
// other net.Addr can make the map panic.
func keyOf(task uint64, remote net.Addr) idKey {
	switch remote.(type) {
	case *net.TCPAddr, *net.UnixAddr:
		return idKey{task, remote}
	}
	return idKey{task: task}
}

// maxPendingIDs bounds Logger.ids: the requests in flight whose id was noted and not yet
// recorded. Past it an id is not noted (its line lacks it), so a Logger whose Record is
// not installed never grows past a few MiB.
const maxPendingIDs = 1 << 16

// accessEntry is a record with its path owned by the entry (the remote address is an
// immutable net.Addr: formatted by the writer, off the loop).
type accessEntry struct {
	accounting.RequestRecord
	requestID string
}

// New starts an access logger writing to l (Validate-style errors name the
// options field). Any goroutine.
func New(l *slog.Logger, opts Options) (*Logger, error) {
	if l == nil {
		return nil, fmt.Errorf("accesslog: New: nil logger")
	}
	if opts.SampleEvery < 0 {
		return nil, fmt.Errorf("accesslog: Options.SampleEvery must not be negative, got %d", opts.SampleEvery)
	}
	if opts.Buffer < 0 {
		return nil, fmt.Errorf("accesslog: Options.Buffer must not be negative, got %d", opts.Buffer)
	}
	if opts.Buffer == 0 {
		opts.Buffer = DefaultBuffer
	}
	a := &Logger{l: l, level: opts.Level, every: uint64(max(opts.SampleEvery, 1)),
		ch: make(chan accessEntry, opts.Buffer), stop: make(chan struct{}), done: make(chan struct{}),
		reqID: opts.RequestID}
	if a.reqID != nil {
		a.ids = map[idKey]string{}
	}
	go a.run()
	return a, nil
}

// Record is the loop.Config.OnRequestDone hook: it samples r and queues a copy for the writer
// goroutine, or drops it (counted) when the buffer is full. It never blocks. Safe for
// concurrent use: a server of several loops calls it from each (sampling counts the
// requests of all of them together).
func (a *Logger) Record(r *accounting.RequestRecord) {
	var id string
	if a.ids != nil && r.TaskID != 0 {
		k := keyOf(r.TaskID, r.Remote)
		a.mu.Lock()
		if id = a.ids[k]; id != "" {
			delete(a.ids, k)
		}
		a.mu.Unlock()
	}
	if a.n.Add(1)%a.every != 0 && r.Status < 500 {
		return
	}
	e := accessEntry{RequestRecord: *r, requestID: id}
	e.Path = strings.Clone(r.Path)
	select {
	case a.ch <- e:
	default:
		a.dropped.Add(1)
	}
}

// Middleware returns the middleware that hands Options.RequestID's value to Record (a
// RequestRecord carries no request values). Mount it on either side of the middleware that
// sets the id (requestid.New): it notes the id before the handler runs when it is set
// already, after the handler returns (a panic included) otherwise; a request is recorded
// once its handler's task has ended, so either way its line has the id. With
// Options.RequestID nil it returns next unchanged. Any goroutine; the middleware is safe
// for concurrent use.
func (a *Logger) Middleware() loop.Middleware {
	return func(next loop.HandlerFunc) loop.HandlerFunc {
		if a.reqID == nil {
			return next
		}
		return func(c *loop.Ctx) {
			if a.note(c) {
				next(c)
				return
			}
			defer a.note(c) // the id is set further in: note it once the handler returns
			next(c)
		}
	}
}

// note keeps c's id for Record, reporting whether there was one. From c's handler task.
func (a *Logger) note(c *loop.Ctx) bool {
	id := a.reqID(c)
	if id == "" {
		return false
	}
	a.mu.Lock()
	if len(a.ids) < maxPendingIDs {
		a.ids[keyOf(c.Task.ID(), c.RemoteAddr())] = id
	}
	a.mu.Unlock()
	return true
}

// writeEvery is how often the writer goroutine drains the buffer. It polls rather than
// waiting on the channel so that Record never wakes a goroutine: a wake-up costs the loop
// microseconds (a futex call), many times the rest of Record. Log lines are therefore up to
// this late, and the buffer must hold this long's worth of records.
const writeEvery = 50 * time.Millisecond

// run writes the queued records every writeEvery until Close, then the rest.
func (a *Logger) run() {
	defer close(a.done)
	tick := time.NewTicker(writeEvery)
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
func (a *Logger) drain() {
	ctx := context.Background()
	for {
		var e accessEntry
		select {
		case e = <-a.ch:
		default:
			return
		}
		attrs := [...]slog.Attr{
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
			slog.String("request_id", e.requestID),
		}
		n := len(attrs)
		if a.reqID == nil {
			n-- // no request_id column
		}
		a.l.LogAttrs(ctx, a.level, "request", attrs[:n]...)
		a.logged.Add(1)
	}
}

// Close stops the writer goroutine once it has written the records queued so far. Call it
// after the server has stopped: records passed to Record later are not written. Any
// goroutine; later calls return at once.
func (a *Logger) Close() {
	a.closing.Do(func() { close(a.stop) })
	<-a.done
}

// Logged returns how many records were written. Any goroutine.
func (a *Logger) Logged() uint64 { return a.logged.Load() }

// Dropped returns how many sampled records were dropped because the buffer was full. Any
// goroutine.
func (a *Logger) Dropped() uint64 { return a.dropped.Load() }

// addrString formats an address, "" for none.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
