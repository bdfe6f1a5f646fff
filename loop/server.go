package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/internal/recorder"
	"github.com/batonrt/baton/internal/router"
	"github.com/batonrt/baton/internal/scheduler"
	"github.com/batonrt/baton/offload"
)

// Errors returned by Server methods.
var (
	// ErrServerClosed is returned by ListenAndServe after Shutdown or Close, and by Post
	// once the loop no longer runs posted functions.
	ErrServerClosed = errors.New("loop: server closed")
	// errEngineStopped is wrapped by the error ListenAndServe returns when the event loop
	// stopped without a Shutdown or Close: a failure a supervisor should restart on (any
	// error other than ErrServerClosed is one).
	errEngineStopped = errors.New("loop: event loop stopped without a shutdown")
	// errServerStarted is returned by ListenAndServe when it is called a second time: a
	// programming mistake, not a condition to branch on.
	errServerStarted = errors.New("loop: server already started")
)

// Server is an HTTP/1.1 server whose handlers all run as cooperative tasks on one event loop.
//
// Create it with New, add routes with Handle (and middleware with Use) before
// ListenAndServe, then serve. Methods say on which goroutine they may be called; see the
// package documentation. Its fields are grouped by who may touch them.
type Server struct {
	// Immutable after New.
	cfg     Config
	log     *slog.Logger
	sched   *scheduler.Scheduler
	mode    runMode
	trusted trustedSet // Config.TrustedProxies (realip.go)
	// handlersOnLoop is true in single-thread mode: request handlers run on the loop (set
	// with mode by setMode, the one place that decides); poolCtx is mode.reuseCtx(), read
	// there once because releaseCtx asks it per request.
	handlersOnLoop bool
	poolCtx        bool
	epoch          time.Time
	pool           *offload.Pool
	router         router.Router[*route] // written by Handle before ListenAndServe, read-only after

	runTaskFn   func(*scheduler.Task)
	chaining    chainState // request tasks serving their connection's next request (chain.go)
	heads       headStarts // cached response head starts (responsehead.go); loop-confined
	routes      routeMemo  // the last parameterless match (routememo.go); loop-confined
	housekeepFn func()
	pumpFn      func()
	sweepEvery  time.Duration
	middleware  []Middleware        // added by Use before ListenAndServe
	patterns    []string            // the routes registered so far, for Use's check
	shards      *shardSet           // every shard of the server, nil with Config.Shards == 1 (shard.go)
	shardIdx    int                 // this Server's index in shards
	loopRef     *Loop               // what Server.Loop returns for this loop
	onStart     []func(*Loop) error // OnStart's functions, run once on the loop (onstart.go)

	// Safe for concurrent use.
	life      lifecycle
	door      door
	addr      atomic.Pointer[net.TCPAddr]
	ready     chan struct{}            // closed when the loop is reachable (or it never will be)
	done      chan struct{}            // closed when ListenAndServe has returned, or at a stop before start
	dateBytes atomic.Pointer[[]byte]   // the current Date header value, replaced every sweep
	mtWG      sync.WaitGroup           // multi-thread handler goroutines and RunOffLoop goroutines (loop/nethttp)
	mtRunning atomic.Int64             // how many of them run: mtWG has no count to read
	doneRec   accounting.RequestRecord // loop-owned: the record handed to Config.OnRequestDone, reused (accesslog.go)
	gatesMu   sync.Mutex
	gates     []*offload.Gate // guarded by gatesMu
	statsReg  *statsRegistry  // AddStats's sections, shared by every shard (statsections.go)
	eng       atomic.Pointer[gnet.Engine]
	ctlPeer   atomic.Int64                // our end of the control socket pair (fd), -1 when none
	drainPoll atomic.Pointer[drainPoller] // the drain watch's goroutine, once started
	tickOnce  sync.Once
	startErr  atomic.Pointer[error] // why the loop could not be reached, if it could not
	guard     serveGuard            // owns the listening socket (accept_guard.go)
	baseCtx   context.Context       // cancelled when the loop stops
	cancel    context.CancelFunc
	drainSig  *Future[struct{}]        // set when the drain begins
	hooksMu   sync.Mutex               // guards onDrain
	onDrain   []func(time.Time)        // run on the loop when the drain begins; guarded by hooksMu
	pendingMu sync.Mutex               // guards pending
	pending   map[*TaskHandle]struct{} // background tasks posted, not yet started
	ctxMu     sync.Mutex               // guards drainCtx
	drainCtx  context.Context          // the first Shutdown's context, for the offload pool's close

	// Loop-owned.
	conns      connTable
	ctxFree    []*Ctx // pooled request contexts
	date       httpcodec.Date
	adm        admission
	drain      drainer
	inflight   int    // request handlers started and not yet finished (admitted or exempt)
	parsed     uint64 // requests parsed and dispatched (answered by a handler or by the server)
	panics     uint64 // handler and background task panics
	panicLog   *recorder.LogLimiter
	refusalLog *recorder.LogLimiter
	pumpPosted bool
	turnAt     int64  // clock reading at the start of the current callback, 0 outside one
	lastAt     int64  // latest clock reading in the current callback, 0 when stale (see start)
	yieldAt    int64  // turnAt of the callback that last yielded (yield.go)
	yield      func() // the loop's yield: yieldFor(cfg); set by newServer
	housekeep  *scheduler.Timer
	control    gnet.Conn
	acct       acct
	drains     drainWatch
	lag        lagSampler // the loop's lag and utilisation, published for Vitals (vitals.go)
	arr        arrivalBound
	values     map[any]any // Loop.Value: features' per-loop state
}

// New returns a Server for cfg. It panics if cfg is invalid (see Config.Validate); call
// Validate first to get the error instead. Safe for concurrent use.
func New(cfg Config) *Server {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg = cfg.withDefaults()
	var s *Server
	if cfg.Shards > 1 {
		s = newShards(cfg) // shard.go
	} else {
		s = newServer(cfg, nil)
	}
	s.warnConfig()
	return s
}

// newServer returns one loop's Server for cfg (with defaults applied), using pool as its
// offload pool, or a pool of its own when pool is nil.
func newServer(cfg Config, pool *offload.Pool) *Server {
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
		pending: map[*TaskHandle]struct{}{},
	}
	s.loopRef = &Loop{srv: s}
	for _, p := range cfg.TrustedProxies {
		s.trusted = append(s.trusted, p.Masked())
	}
	s.statsReg = &statsRegistry{}
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	s.ctlPeer.Store(-1)
	s.door.init()
	s.runTaskFn = s.runTask
	s.housekeepFn = s.housekeepTick
	s.pumpFn = func() {}
	s.yield = yieldFor(cfg)
	s.sweepEvery = sweepInterval(cfg)
	s.adm = newAdmission(cfg.RequestConcurrency, cfg.MaxQueueLength)
	s.panicLog = recorder.NewLogLimiter(10, time.Second)     // a storm logs a sample with a count
	s.refusalLog = recorder.NewLogLimiter(1, 10*time.Second) // one line per overload episode
	s.drainSig = NewFuture[struct{}](s.loopRef)
	s.drains.srv = s
	s.setMode(cfg.MultiThread) // mode.go
	s.sched = scheduler.New(scheduler.Config{
		Post:         s.postInternal,
		OnPanic:      s.onTaskPanic,
		Hooks:        s.schedHooks(),
		NoAccounting: cfg.NoAccounting,
		OSClock:      cfg.OSClock,
		NewAlarm:     alarmFor(cfg), TimerSlack: slackFor(cfg), // alarm.go
		// A coroutine made on a locked thread may only be resumed there: the scheduler
		// then cannot finish a task that called runtime.Goexit (it stays parked).
		LockedOSThread: cfg.LockOSThread,
	})
	s.epoch = s.sched.Epoch() // one clock for the server, the scheduler and accounting
	s.pool = pool
	if s.pool == nil {
		s.pool = offload.New(cfg.Offload)
	}
	s.initAccounting()
	s.initLag()
	s.date.Update(time.Now())
	s.publishDate()
	return s
}

// warnConfig logs settings that New accepts but that do less than they say.
func (s *Server) warnConfig() {
	if s.cfg.CPUClock && !s.cfg.LockOSThread {
		s.log.Warn("loop: Config.CPUClock needs Config.LockOSThread (the loop's thread changes under it otherwise); CPU time is not measured")
	}
	if s.cfg.Offload.Tokens == 1 && !s.cfg.Offload.NoLanes {
		s.log.Warn("loop: Config.Offload.Tokens is 1: the offload pool's fast and slow lanes are off (one token cannot be split); "+
			"every offloaded call waits in one FIFO queue, so a slow call delays the fast ones behind it. Give it 2 or more tokens for lanes, or set Offload.NoLanes to say so",
			"tokens", s.cfg.Offload.Tokens)
	}
}

// Config returns the server's configuration with every default applied: what a feature
// built beside the engine (package loop/health, say) reads to derive its own defaults.
// Any goroutine.
func (s *Server) Config() Config { return s.cfg }

// publishDate makes the loop's current Date value readable by every goroutine.
func (s *Server) publishDate() {
	b := append([]byte(nil), s.date.Bytes()...)
	s.dateBytes.Store(&b)
}

// sweepInterval is how often the loop checks connection deadlines: a quarter of the
// shortest timeout, so a timeout fires at most 25% late, clamped to [10 ms, 500 ms] (the
// upper bound also keeps the Date header within half a second of the truth).
func sweepInterval(cfg Config) time.Duration {
	d := 500 * time.Millisecond
	for _, t := range []time.Duration{cfg.ReadHeaderTimeout, cfg.IdleTimeout, cfg.LingerTimeout} {
		if t > 0 && t/4 < d {
			d = t / 4
		}
	}
	return max(d, 10*time.Millisecond)
}

// Handle registers h for pattern: "[METHOD ]/path", where a segment "{name}" matches one
// path segment (read it with Ctx.PathValue) and a final "{name...}" matches the rest of the
// path. Without a method the route matches every method; GET routes also serve HEAD.
// The middleware added with Use wraps h (Use after a route panics). Options such as Exempt change how the
// route is served. With Config.Shards > 1 the route is registered on every shard: h
// runs on whichever shard the connection landed on (Ctx.Shard tells which). It panics on a
// malformed or duplicate pattern, or after ListenAndServe was called. Call it before
// ListenAndServe, from one goroutine.
func (s *Server) Handle(pattern string, h HandlerFunc, opts ...RouteOption) {
	s.handleAll(pattern, h, s.middleware, opts)
}

// handleAll registers the route on every shard (on s alone without shards).
func (s *Server) handleAll(pattern string, h HandlerFunc, mw []Middleware, opts []RouteOption) {
	if s.shards == nil {
		s.handle(pattern, h, mw, opts)
		return
	}
	for _, sh := range s.shards.all {
		sh.handle(pattern, h, mw, opts)
	}
}

func (s *Server) handle(pattern string, h HandlerFunc, mw []Middleware, opts []RouteOption) {
	if h == nil {
		panic("loop: Handle: nil handler for " + pattern)
	}
	if s.life.load() != stateNew {
		panic("loop: Handle called after ListenAndServe")
	}
	r := &route{h: chain(h, mw), pattern: strings.Join(strings.Fields(pattern), " ")}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(r)
		}
	}
	if s.acct.on {
		r.acct = s.acct.routes.Route(r.pattern)
	}
	if s.cfg.ProfileLabels {
		r.labels = routeLabels(r.pattern)
	}
	if err := s.router.Add(pattern, r); err != nil {
		panic(fmt.Sprintf("loop: Handle(%q): %v", pattern, err))
	}
	s.patterns = append(s.patterns, r.pattern)
	s.routes = routeMemo{}
}

// Post runs fn on the loop goroutine soon, after the functions posted before it. It is the
// one door for other goroutines into the loop: fn may touch loop-owned state, resolve
// Futures and start tasks. fn must not block. Functions posted before the server is ready
// run once it is. Post returns ErrServerClosed if the loop will not run fn. With
// Config.Shards > 1, fn runs on this Server's shard: shard 0 for the Server New returned
// (Loop(i).Post reaches another). Safe for concurrent use.
func (s *Server) post(fn func()) error {
	if fn == nil {
		panic("loop: Post(nil)")
	}
	if !s.door.post(fn) {
		return ErrServerClosed
	}
	return nil
}

// postInternal is the scheduler's door.
func (s *Server) postInternal(fn func()) {
	s.door.post(fn)
}

// Ready returns a channel closed once the server accepts connections and runs posted
// functions (every shard's, with Config.Shards > 1), or once it has stopped without getting
// there. Safe for concurrent use.
func (s *Server) Ready() <-chan struct{} {
	if s.shards != nil {
		return s.shards.ready
	}
	return s.ready
}

// Done returns a channel closed when ListenAndServe has returned, or when a server that
// never started was shut down. Safe for concurrent use.
func (s *Server) Done() <-chan struct{} {
	if s.shards != nil {
		return s.shards.done
	}
	return s.done
}

// Addr returns the address the server listens on, or nil before it is ready. With port 0
// in Config.Addr it reports the port the kernel chose (every shard listens on it). Safe
// for concurrent use.
func (s *Server) Addr() *net.TCPAddr {
	if s.shards != nil {
		return s.shards.all[0].addr.Load()
	}
	return s.addr.Load()
}

// ListenAndServe listens on Config.Addr and serves until Shutdown or Close, then returns
// ErrServerClosed. Any other error means the server could not start, or its event loop
// stopped without a Shutdown: restart it. It blocks; call it
// once, from any goroutine. After a Shutdown or Close it returns ErrServerClosed at once.
// With Config.Shards > 1 it serves every shard and returns when all have stopped; a shard
// that stops by itself makes the others drain (for at most 10 s), and the error
// names it.
func (s *Server) ListenAndServe() error {
	if s.shards != nil {
		return s.shards.listenAndServe()
	}
	return s.serveLoop()
}

// serveLoop is ListenAndServe for one loop. It listens on Config.Addr unless its acceptor is
// already listening (shards: shardSet.listen).
func (s *Server) serveLoop() error {
	if !s.life.move(stateNew, stateStarting) {
		if s.life.load() >= stateStopping {
			<-s.done
			return ErrServerClosed
		}
		return errServerStarted
	}
	defer close(s.done)
	if !s.cfg.KeepFileLimit {
		raiseFileLimit(s.log)
	}
	raiseGOMAXPROCS(s.cfg.KeepGOMAXPROCS, s.loopCount(), s.log) // procs.go
	opts := []gnet.Option{
		gnet.WithNumEventLoop(1),
		gnet.WithMulticore(false),
		gnet.WithReusePort(true), // one goroutine does accept and I/O (see shared notes)
		gnet.WithReuseAddr(true), // quick restarts despite TIME_WAIT
		gnet.WithLockOSThread(s.cfg.LockOSThread),
		gnet.WithTicker(true), // the first tick registers the control connection
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(gnetLogger{s.log}),
		gnet.WithLoadBalancing(gnet.LeastConnections), // Engine.Register runs on the acceptor goroutine; RoundRobin's next() is not safe for that
	}
	var err error
	if s.guard.acc.Load() == nil {
		err = s.guard.listen(s.cfg.Addr, s.log) // we accept, not gnet (accept_guard.go)
	}
	if err == nil {
		err = gnet.Run((*events)(s), s.guard.gnetAddr(), opts...) // was "tcp://"+s.cfg.Addr
	}
	s.guard.finish()                            // close the listener, wait for the acceptor goroutine
	requested := s.life.load() >= stateDraining // Shutdown or Close asked for this stop
	if from, _ := s.life.advance(stateStopping); from == stateServing || from == stateStarting {
		requested = false
	}
	s.door.close()
	if p := s.drainPoll.Load(); p != nil {
		p.stop()
	}
	s.endPending()
	s.cancel()
	s.waitHandlerGoroutines() // they see their context cancelled; waited for until the deadline
	if w := s.acct.watchdog; w != nil {
		w.Stop()
	}
	if s.shards == nil { // shards share one pool: shardSet.listenAndServe closes it
		s.closePoolAfterStop()
	}
	if fd := s.ctlPeer.Swap(-1); fd >= 0 {
		_ = unix.Close(int(fd))
	}
	s.life.move(stateStopping, stateStopped)
	s.releaseReady()
	switch {
	case err != nil:
		return fmt.Errorf("loop: serve %s: %w", s.cfg.Addr, err)
	case s.startErr.Load() != nil:
		return fmt.Errorf("loop: serve %s: %w", s.cfg.Addr, *s.startErr.Load())
	case !requested:
		return fmt.Errorf("loop: serve %s: %w", s.cfg.Addr, errEngineStopped)
	}
	return ErrServerClosed
}

// waitHandlerGoroutines waits for the goroutines of multi-thread handlers and net/http
// adapter handlers still running once the loop has stopped (their contexts are cancelled),
// until the first Shutdown's context ends, or for offloadCloseTimeout when the server
// stopped by itself. A handler that ignores its context is then logged and abandoned: its
// goroutine runs on, its writes fail, and Shutdown returns ctx.Err() at the deadline as
// promised instead of waiting for it.
func (s *Server) waitHandlerGoroutines() {
	done := make(chan struct{})
	go func() { // ends when the last handler returns, abandoned or not
		s.mtWG.Wait()
		close(done)
	}()
	ctx := s.shutdownContext()
	if ctx == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), offloadCloseTimeout)
		defer cancel()
	}
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done: // they returned as the context ended
		default:
			if s.mtRunning.Load() == 0 {
				return // none runs: done is not closed only because its goroutine has not run yet
			}
			s.log.Warn("loop: handler goroutines (Config.MultiThread or Server.RunOffLoop) still running at the shutdown deadline: abandoned; they ignore their request's context",
				"err", ctx.Err())
		}
	}
}

// handlerGoroutineStarted counts a multi-thread handler or RunOffLoop goroutine about to
// start; handlerGoroutineEnded is its last call. Any goroutine.
func (s *Server) handlerGoroutineStarted() {
	s.mtRunning.Add(1)
	s.mtWG.Add(1)
}

func (s *Server) handlerGoroutineEnded() {
	s.mtRunning.Add(-1)
	s.mtWG.Done()
}

// closePoolAfterStop closes the offload pool once the loop has stopped, waiting for
// offloaded functions until the first Shutdown's context ends, or for offloadCloseTimeout
// when the server stopped by itself.
func (s *Server) closePoolAfterStop() {
	poolCtx := s.shutdownContext()
	if poolCtx == nil { // stopped by itself: bound the wait for offloaded functions
		var cancel context.CancelFunc
		poolCtx, cancel = context.WithTimeout(context.Background(), offloadCloseTimeout)
		defer cancel()
	}
	s.closePool(poolCtx)
}

// releaseReady closes ready if the server never became ready, releasing its waiters.
func (s *Server) releaseReady() {
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// Shutdown stops the server gracefully: requests already being handled finish and get
// their responses, idle connections close, requests arriving meanwhile get 503 with
// "Retry-After: 1" and "Connection: close" (they did not run), the drain signal (Server.Draining) is set and the OnDrain hooks
// run; once nothing is in flight the loop stops. If ctx ends first, the remaining tasks are
// unwound (their deferred functions run, their connections close) and Shutdown returns
// ctx.Err() once the loop has stopped; offloaded functions, and multi-thread or net/http
// adapter handlers that ignore their cancelled context, still running are waited for only
// until ctx ends (then logged and abandoned). It returns nil if the drain completed, also when the server was
// never started. Every call waits for the stop; later calls return nil. A Shutdown during
// start begins the drain as soon as the loop is up. With Config.Shards > 1 every shard
// drains at once under ctx, and Shutdown returns when all have stopped. Safe for
// concurrent use.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.shards != nil {
		return s.shards.shutdown(ctx)
	}
	return s.shutdownOne(ctx)
}

// shutdownOne is Shutdown for one loop.
func (s *Server) shutdownOne(ctx context.Context) error {
	s.setShutdownContext(ctx)
	for {
		switch st := s.life.load(); st {
		case stateNew:
			if !s.life.move(stateNew, stateStopped) {
				continue // ListenAndServe won the race: shut that down instead
			}
			s.door.close()
			s.endPending()
			s.cancel()
			if s.shards == nil {
				s.closePool(ctx)
			}
			s.releaseReady()
			close(s.done)
			return nil
		case stateStarting, stateServing:
			if !s.life.move(st, stateDraining) {
				continue
			}
			_ = s.post(s.beginDrain) // runs as soon as the loop is reachable
		}
		break
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	}
	_ = s.post(func() {
		s.drain.report.DeadlineReached = true
		s.requestStop()
	})
	<-s.done
	return ctx.Err()
}

// Close stops the server at once: tasks are unwound and connections closed without waiting
// for responses. It returns when the loop has stopped. Safe for concurrent use.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Shutdown(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// setShutdownContext remembers the first Shutdown's context: it bounds the wait for
// offloaded functions once the loop has stopped.
func (s *Server) setShutdownContext(ctx context.Context) {
	s.ctxMu.Lock()
	if s.drainCtx == nil {
		s.drainCtx = ctx
	}
	s.ctxMu.Unlock()
}

// offloadCloseTimeout bounds how long ListenAndServe waits for offloaded functions still
// running after the loop stopped by itself (no Shutdown context to honour).
const offloadCloseTimeout = 10 * time.Second

// shutdownContext returns the first Shutdown's context, or nil if none was called.
func (s *Server) shutdownContext() context.Context {
	s.ctxMu.Lock()
	defer s.ctxMu.Unlock()
	return s.drainCtx
}

// DrainReport returns what the last graceful shutdown drained, summed over the loops. It
// waits until Done is closed. Safe for concurrent use.
func (s *Server) DrainReport() DrainReport {
	if s.shards != nil {
		return s.shards.drainReport()
	}
	<-s.done
	return s.drain.report
}

// nanotime is the loop's monotonic clock, in nanoseconds since the server was created: the
// scheduler's, so that task figures and request times share one clock. Loop only.
func (s *Server) nanotime() int64 { return s.sched.Now() }

// timeAt converts a loop clock reading to wall-clock time.
func (s *Server) timeAt(now int64) time.Time { return s.epoch.Add(time.Duration(now)) }

// nanotimeAny is the same clock read from any goroutine (through the OS clock).
func (s *Server) nanotimeAny() int64 { return int64(time.Since(s.epoch)) }

// now returns the current turn's clock reading, or reads the clock outside a turn.
// Loop-confined.
func (s *Server) now() int64 {
	if s.turnAt != 0 {
		return s.turnAt
	}
	return s.nanotime()
}

// housekeepTick refreshes the Date header and enforces connection deadlines.
func (s *Server) housekeepTick() {
	s.date.Update(time.Now())
	s.publishDate()
	s.sweep(s.nanotime())
	if s.life.load() < stateStopping {
		s.housekeep = s.sched.AfterFunc(s.sweepEvery, s.housekeepFn)
	}
}
