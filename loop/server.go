package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/httpcodec"
	"github.com/batonrt/baton/internal/router"
	"github.com/batonrt/baton/offload"
	"github.com/batonrt/baton/scheduler"
)

// Errors returned by Server methods.
var (
	// ErrServerClosed is returned by ListenAndServe after Shutdown or Close, and by Post
	// once the loop no longer runs posted functions.
	ErrServerClosed = errors.New("loop: server closed")
	// ErrServerStarted is returned by ListenAndServe when it is called a second time.
	ErrServerStarted = errors.New("loop: server already started")
)

// Server lifecycle states, in order. The state only moves forward.
const (
	stateNew      int32 = iota // created; routes may be added
	stateStarting              // ListenAndServe called, loop not yet reachable
	stateServing               // loop reachable; Ready is closed
	stateDraining              // Shutdown called: no new work, in-flight work finishing
	stateStopped               // the loop has exited; ListenAndServe has returned or is returning
)

// Server is an HTTP/1.1 server whose handlers all run as cooperative tasks on one event loop.
//
// Create it with New, add routes with Handle before ListenAndServe, then serve. Methods say
// on which goroutine they may be called; see the package documentation.
type Server struct {
	cfg    Config
	log    *slog.Logger
	router router.Router[*route]
	sched  *scheduler.Scheduler
	door   door
	epoch  time.Time

	// Loop-owned state.
	conns    []*conn // open client connections, each knowing its index
	dirty    []*conn // connections with output to write or requests to parse
	ctxFree  []*Ctx  // pooled request contexts
	date     httpcodec.Date
	inflight int // request handlers started and not yet finished
	active   int // of those, the ones holding an admission slot
	queue    []*Ctx
	rejected uint64 // requests refused with 429
	parsed   uint64 // requests parsed and dispatched (answered by a handler or by the server)
	// Completion rate for Retry-After.
	completions, rateCount uint64
	rateAt                 int64
	drainRate              float64 // completions per second, exponentially weighted
	draining               bool
	stopping               bool // the next door run stops the engine
	pumpPosted             bool
	turnAt                 int64 // clock reading at the start of the current callback, 0 outside one
	lastAt                 int64 // latest clock reading in the current callback, 0 when stale (see start)
	schedDone              bool  // the scheduler has been closed
	housekeep              *scheduler.Timer
	sweepEvery             time.Duration
	control                gnet.Conn
	drained                DrainReport
	acct                   acct

	runTaskFn    func(*scheduler.Task)
	housekeepFn  func()
	pumpFn       func()
	shutdownOnce sync.Once

	// Safe for concurrent use.
	drainingFlag atomic.Bool            // draining, readable by multi-thread handlers
	dateBytes    atomic.Pointer[[]byte] // the current Date header value, replaced every sweep
	mtWG         sync.WaitGroup         // multi-thread handler goroutines
	pool         *offload.Pool
	gatesMu      sync.Mutex
	gates        []*offload.Gate // guarded by gatesMu
	state        atomic.Int32
	addr         atomic.Pointer[net.TCPAddr]
	ready        chan struct{} // closed when the loop is reachable
	done         chan struct{} // closed when ListenAndServe returns
	eng          atomic.Pointer[gnet.Engine]
	ctlPeer      atomic.Int64 // our end of the control socket pair (fd), -1 when none
	tickOnce     sync.Once
	startErr     atomic.Pointer[error] // why the loop could not be reached, if it could not
	baseCtx      context.Context
	cancel       context.CancelFunc
}

// DrainReport says what a graceful shutdown drained. It is filled on the loop and can be
// read with Server.DrainReport once ListenAndServe has returned.
type DrainReport struct {
	InFlight        int  // request handlers running or parked when Shutdown began
	Queued          int  // requests waiting for admission when Shutdown began
	ClosedIdle      int  // idle connections closed when Shutdown began
	RejectedDuring  int  // requests answered 503 while draining
	ForcedTasks     int  // requests still unfinished (running or queued) when the deadline forced the stop
	DeadlineReached bool // the Shutdown context ended before the drain finished
}

// New returns a Server for cfg. It panics if cfg is invalid (see Config.Validate); call
// Validate first to get the error instead. Safe for concurrent use.
func New(cfg Config) *Server {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:   cfg,
		log:   cfg.Logger,
		epoch: time.Now(),
		ready: make(chan struct{}),
		done:  make(chan struct{}),
	}
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	s.ctlPeer.Store(-1)
	s.door.run = s.runDoor
	s.runTaskFn = s.runTask
	s.housekeepFn = s.housekeepTick
	s.pumpFn = func() {}
	s.sweepEvery = sweepInterval(cfg)
	s.sched = scheduler.New(scheduler.Config{
		Post:         s.postInternal,
		OnPanic:      s.onTaskPanic,
		Hooks:        s.schedHooks(),
		NoAccounting: cfg.NoAccounting,
		OSClock:      cfg.OSClock,
	})
	s.epoch = s.sched.Epoch() // one clock for the server, the scheduler and accounting
	s.pool = offload.New(cfg.Offload)
	s.initAccounting()
	s.date.Update(time.Now())
	s.publishDate()
	return s
}

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
// Options such as Exempt change how the route is served.
// It panics on a malformed or duplicate pattern, or after ListenAndServe was called.
// Call it before ListenAndServe, from one goroutine.
func (s *Server) Handle(pattern string, h HandlerFunc, opts ...RouteOption) {
	if h == nil {
		panic("loop: Handle: nil handler for " + pattern)
	}
	if s.state.Load() != stateNew {
		panic("loop: Handle called after ListenAndServe")
	}
	r := &route{h: h, pattern: strings.Join(strings.Fields(pattern), " ")}
	for _, o := range opts {
		o(r)
	}
	if s.acct.on {
		r.acct = s.acct.routes.Route(r.pattern)
	}
	if err := s.router.Add(pattern, r); err != nil {
		panic(fmt.Sprintf("loop: Handle(%q): %v", pattern, err))
	}
}

// Post runs fn on the loop goroutine soon, after the functions posted before it. It is the
// one door for other goroutines into the loop: fn may touch loop-owned state, resolve
// Futures and start tasks. fn must not block. Functions posted before the server is ready
// run once it is. Post returns ErrServerClosed if the loop will not run fn.
// Safe for concurrent use.
func (s *Server) Post(fn func()) error {
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

// Go starts fn as a background task on the loop: like a handler it may park (Sleep, Yield,
// Await) and shares loop state without locks. Its Context is cancelled when the server
// stops. Safe for concurrent use; the task starts once the server is ready.
func (s *Server) Go(fn func(t *Task)) {
	_ = s.Post(func() { s.spawnBackground(fn) })
}

// Every runs fn on the loop every d, at a fixed rate (missed ticks are skipped, not
// bunched), as a background task: a game tick that shares state with handlers without
// locks. It stops when the server stops. Safe for concurrent use.
func (s *Server) Every(d time.Duration, fn func(t *Task)) {
	if d <= 0 {
		panic("loop: Every: non-positive interval")
	}
	_ = s.Post(func() {
		if s.schedDone {
			return
		}
		bt := &Task{srv: s}
		bt.t = s.sched.Every(d, func(*scheduler.Task) { fn(bt) })
		bt.t.SetLabel("every")
	})
}

func (s *Server) spawnBackground(fn func(t *Task)) {
	if s.schedDone {
		return
	}
	bt := &Task{srv: s}
	bt.t = s.sched.Go(func(t *scheduler.Task) {
		defer bt.release()
		s.publishTask(t, &s.acct.bgKey)
		fn(bt)
	})
	if s.acct.on {
		s.acct.loop.TaskStarted()
	}
	bt.t.SetLabel("go")
}

// Ready returns a channel closed once the server accepts connections and runs posted
// functions. Safe for concurrent use.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Done returns a channel closed when ListenAndServe has returned. Safe for concurrent use.
func (s *Server) Done() <-chan struct{} { return s.done }

// Addr returns the address the server listens on, or nil before it is ready. With port 0
// in Config.Addr it reports the port the kernel chose. Safe for concurrent use.
func (s *Server) Addr() *net.TCPAddr { return s.addr.Load() }

// ListenAndServe listens on Config.Addr and serves until Shutdown or Close, then returns
// ErrServerClosed; any other error means the server could not start or failed. It blocks;
// call it once, from any goroutine.
func (s *Server) ListenAndServe() error {
	if !s.state.CompareAndSwap(stateNew, stateStarting) {
		if s.state.Load() == stateStopped {
			return ErrServerClosed
		}
		return ErrServerStarted
	}
	defer close(s.done)
	if !s.cfg.KeepFileLimit {
		raiseFileLimit(s.log)
	}
	opts := []gnet.Option{
		gnet.WithNumEventLoop(1),
		gnet.WithMulticore(false),
		gnet.WithReusePort(true), // one goroutine does accept and I/O (see shared notes)
		gnet.WithReuseAddr(true), // quick restarts despite TIME_WAIT
		gnet.WithLockOSThread(s.cfg.LockOSThread),
		gnet.WithTicker(true), // the first tick registers the control connection
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(gnetLogger{s.log}),
	}
	err := gnet.Run((*events)(s), "tcp://"+s.cfg.Addr, opts...)
	s.state.Store(stateStopped)
	s.door.close()
	s.cancel()
	s.mtWG.Wait() // multi-thread handlers still running see their context cancelled
	if w := s.acct.watchdog; w != nil {
		w.Stop()
	}
	s.closePool()
	if fd := s.ctlPeer.Swap(-1); fd >= 0 {
		_ = unix.Close(int(fd))
	}
	select {
	case <-s.ready:
	default:
		close(s.ready) // never became ready: release waiters
	}
	if err != nil {
		return fmt.Errorf("loop: serve %s: %w", s.cfg.Addr, err)
	}
	if e := s.startErr.Load(); e != nil {
		return fmt.Errorf("loop: serve %s: %w", s.cfg.Addr, *e)
	}
	return ErrServerClosed
}

// Shutdown stops the server gracefully: requests already being handled finish and get
// their responses, idle connections close, requests arriving meanwhile get 503 with
// "Connection: close", and once nothing is in flight the loop stops. If ctx ends first, the
// remaining tasks are unwound (their deferred functions run, their connections close) and
// Shutdown returns ctx.Err() once the loop has stopped. It returns nil if the drain
// completed, also when the server was never started. Safe for concurrent use.
func (s *Server) Shutdown(ctx context.Context) error {
	switch s.state.Load() {
	case stateNew:
		s.state.Store(stateStopped)
		s.closePool()
		return nil
	case stateStopped:
		<-s.done
		return nil
	}
	s.shutdownOnce.Do(func() {
		s.state.Store(stateDraining)
		_ = s.Post(s.beginDrain)
	})
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	}
	_ = s.Post(func() {
		s.drained.DeadlineReached = true
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

// DrainReport returns what the last graceful shutdown drained. Call it after Done is closed.
func (s *Server) DrainReport() DrainReport {
	<-s.done
	return s.drained
}

// nanotime is the loop's monotonic clock, in nanoseconds since the server was created: the
// scheduler's, so that task figures and request times share one clock. Loop only (off the
// loop, use time.Since(s.epoch)).
func (s *Server) nanotime() int64 { return s.sched.Now() }

// runDoor runs on the loop for each batch of posted functions.
func (s *Server) runDoor(context.Context) error {
	s.busyStart()
	defer s.busyEnd()
	batch := s.door.take()
	for _, fn := range batch {
		s.safely(fn)
	}
	s.door.recycle(batch)
	s.pumpPosted = false
	if !s.stopping {
		s.pump()
	}
	if s.stopping {
		s.finalStop()
		return errEngineShutdown
	}
	return nil
}

// safely runs a posted function, logging rather than propagating a panic so that one bad
// function cannot kill the loop.
func (s *Server) safely(fn func()) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("loop: posted function panicked", "panic", v, "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// pump runs ready tasks and then writes what they produced. It runs after every gnet
// callback and door batch. Tasks made ready while it runs wait for the next turn, so the
// loop polls I/O between batches.
func (s *Server) pump() {
	if s.acct.on {
		_, ready := s.sched.Len()
		s.acct.loop.ReadyDepth(ready)
	}
	more := s.sched.Run()
	s.lastAt = 0 // slices ran since: a request dispatched next reads the clock for its start
	s.flushDirty()
	if more {
		s.postPump()
	}
	s.checkDrained()
}

// postPump arranges another pump after the loop has polled I/O. It writes a byte to the
// control socket rather than posting through the door: gnet runs posted functions in a loop
// that drains its queue before polling again, so a pump that re-posted itself there would
// starve every connection (found by TestYieldingTaskDoesNotStarveIO). A readable control
// socket goes through epoll with all the other connections; its handler then posts the
// pump, which runs after that epoll batch's I/O.
func (s *Server) postPump() {
	if s.pumpPosted {
		return
	}
	s.pumpPosted = true
	if fd := s.ctlPeer.Load(); fd >= 0 {
		if _, err := unix.Write(int(fd), pumpByte[:]); err == nil {
			return
		}
	}
	s.door.post(s.pumpFn) // no control socket (cannot happen once serving): fall back
}

var pumpByte = [1]byte{1}

// requestStop makes the next door run stop the engine. Loop-confined.
func (s *Server) requestStop() {
	if s.stopping {
		return
	}
	s.stopping = true
	s.drained.ForcedTasks = s.inflight + len(s.queue)
	s.door.post(s.pumpFn)
}

// finalStop releases everything the loop owns before gnet closes the connections.
func (s *Server) finalStop() {
	s.door.close()
	s.cancel()
	if !s.schedDone {
		s.schedDone = true
		s.sched.Close()
	}
	for _, cs := range s.conns {
		cs.closing = true
	}
}

// beginDrain starts a graceful shutdown on the loop.
func (s *Server) beginDrain() {
	if s.draining {
		return
	}
	s.draining = true
	s.drainingFlag.Store(true)
	s.drained.InFlight = s.inflight
	s.drained.Queued = len(s.queue)
	s.checkDrained()
	for _, cs := range s.conns {
		// Idle connections: a request already on its way gets 503 within the grace; then
		// the connection closes gracefully (half-close and linger, never a reset). Busy
		// ones: a response written from now on says "Connection: close"; one written
		// before (it said keep-alive) leaves the connection idle with the same grace.
		if cs.ctx == nil && !cs.inBody && cs.gc.InboundBuffered() == 0 && cs.deadlineKind != deadlineLinger {
			s.drained.ClosedIdle++
			s.setIdle(cs)
		}
	}
}

// drainIdleGrace is how long a connection idle when Shutdown began stays open: a request
// the client sent in that instant is answered (503, Connection: close) instead of meeting
// a closed socket.
const drainIdleGrace = 100 * time.Millisecond

// checkDrained stops the server once a drain has nothing left: no handler in flight or
// queued and no connection open (the last ones close gracefully after their responses).
// Loop-confined.
func (s *Server) checkDrained() {
	if s.draining && !s.stopping && s.inflight == 0 && len(s.queue) == 0 && len(s.conns) == 0 {
		s.requestStop()
	}
}

// housekeepTick refreshes the Date header and enforces connection deadlines.
func (s *Server) housekeepTick() {
	s.date.Update(time.Now())
	s.publishDate()
	now := s.nanotime()
	s.updateDrainRate(now)
	s.sweep(now)
	if !s.schedDone {
		s.housekeep = s.sched.AfterFunc(s.sweepEvery, s.housekeepFn)
	}
}

// onTaskPanic turns a handler panic into a logged error and, if possible, a 500.
func (s *Server) onTaskPanic(t *scheduler.Task, v any, stack []byte) {
	if t == nil {
		s.log.Error("loop: timer callback panicked", "panic", v, "stack", string(stack))
		return
	}
	switch a := t.Arg().(type) {
	case *Ctx:
		s.handlerPanicked(a, t.ID(), v, stack)
	default:
		s.log.Error("loop: background task panicked", "task", t.ID(), "label", t.Label(), "panic", v, "stack", string(stack))
	}
}

// events is Server seen by gnet: its callbacks are not part of Server's API.
type events Server

// controlMarker tags the control connection registered at the first tick.
type controlMarker struct{}

func (e *events) OnBoot(eng gnet.Engine) gnet.Action {
	s := (*Server)(e)
	s.eng.Store(&eng)
	if fd, err := eng.Dup(); err == nil {
		if sa, err := unix.Getsockname(fd); err == nil {
			switch a := sa.(type) {
			case *unix.SockaddrInet4:
				s.addr.Store(&net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port})
			case *unix.SockaddrInet6:
				s.addr.Store(&net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port})
			}
		}
		_ = unix.Close(fd)
	}
	return gnet.None
}

// OnTick runs on gnet's ticker goroutine, after the event loop exists. Its first call
// registers one end of a socket pair with the loop; the loop handle of that connection is
// what the door posts through (gnet offers no engine-level Execute).
func (e *events) OnTick() (time.Duration, gnet.Action) {
	s := (*Server)(e)
	s.tickOnce.Do(func() {
		if err := s.registerControl(); err != nil {
			s.startErr.Store(&err)
			s.log.Error("loop: cannot reach the event loop; stopping", "err", err)
			if eng := s.eng.Load(); eng != nil {
				go func() { _ = eng.Stop(context.Background()) }()
			}
		}
	})
	return 24 * time.Hour, gnet.None
}

func (s *Server) registerControl() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socketpair: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "baton-control")
	nc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		_ = unix.Close(fds[1])
		return fmt.Errorf("control conn: %w", err)
	}
	if err := unix.SetNonblock(fds[1], true); err != nil {
		_ = unix.Close(fds[1])
		_ = nc.Close()
		return fmt.Errorf("control peer: %w", err)
	}
	s.ctlPeer.Store(int64(fds[1]))
	ctx := gnet.NewContext(gnet.NewNetConnContext(context.Background(), nc), controlMarker{})
	eng := s.eng.Load()
	ch, err := eng.Register(ctx)
	if err != nil {
		_ = nc.Close()
		return fmt.Errorf("register control conn: %w", err)
	}
	if res := <-ch; res.Err != nil {
		return fmt.Errorf("register control conn: %w", res.Err)
	}
	return nil
}

func (e *events) OnShutdown(gnet.Engine) {}

func (e *events) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	s := (*Server)(e)
	if _, ok := gc.Context().(controlMarker); ok {
		s.control = gc
		s.state.CompareAndSwap(stateStarting, stateServing)
		s.housekeep = s.sched.AfterFunc(s.sweepEvery, s.housekeepFn)
		s.startWatchdog()
		close(s.ready)
		s.door.open(gc.EventLoop())
		return nil, gnet.None
	}
	cs := s.newConn(gc)
	gc.SetContext(cs)
	return nil, gnet.None
}

func (e *events) OnClose(gc gnet.Conn, _ error) gnet.Action {
	s := (*Server)(e)
	cs, ok := gc.Context().(*conn)
	if !ok {
		return gnet.None
	}
	s.connClosed(cs)
	return gnet.None
}

func (e *events) OnTraffic(gc gnet.Conn) gnet.Action {
	s := (*Server)(e)
	s.busyStart()
	defer s.busyEnd()
	cs, ok := gc.Context().(*conn)
	if !ok { // the control connection: a pump was requested
		_, _ = gc.Discard(-1)
		// Pump through the door: gnet runs posted functions after every I/O event of the
		// current epoll batch, so connections that became readable while the last slice ran
		// are served (their new requests run at once) before ready tasks get another slice.
		s.door.post(s.pumpFn)
		return gnet.None
	}
	if cs.closing {
		_, _ = gc.Discard(-1)
		return gnet.None
	}
	if s.stopping {
		return gnet.None
	}
	if cs.ctx != nil || cs.inBody {
		if cs.ctx != nil && gc.InboundBuffered() > s.cfg.MaxBufferedInput {
			// Pipelined input beyond the bound: answer what is in flight, then close.
			s.log.Debug("loop: too much pipelined input; closing after the current response", "remote", gc.RemoteAddr())
			_, _ = gc.Discard(-1)
			cs.closeAfter = true
			return gnet.None
		}
		if cs.ctx != nil {
			return gnet.None // parsed when the current request finishes
		}
	}
	s.serve(cs)
	// New requests ran their first slice in serve. Tasks that were ready before (a task
	// that yielded, one woken meanwhile) run from the control socket's pump, once per loop
	// turn: running them here would give a yielding task a slice per connection read.
	s.flushDirty()
	if _, ready := s.sched.Len(); ready > 0 {
		s.postPump()
	}
	return gnet.None
}
