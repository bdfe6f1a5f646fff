package loop

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/internal/recorder"
	"github.com/batonrt/baton/offload"
)

// The defaults used where a Config field is zero; each field documents its own and why.
const (
	defaultAddr              = "127.0.0.1:8080"
	defaultReadHeaderTimeout = 10 * time.Second
	defaultIdleTimeout       = 2 * time.Minute
	defaultLingerTimeout     = 2 * time.Second
	defaultStallThreshold    = 100 * time.Millisecond
	defaultWriteStallTimeout = 30 * time.Second
	defaultMaxOutputBytes    = 4 << 20
	defaultMaxBufferedInput  = 4 << 20
	defaultStreamSendBuffer  = 128 << 10
)

// Config configures a Server. Its zero value is ready to use; each field documents its
// default and unit. A Config is read once by New and not retained.
type Config struct {
	// Addr is the TCP address to listen on, as "host:port". Default "127.0.0.1:8080":
	// loopback, so that a server started without configuration is not exposed to the
	// network by accident. Port 0 picks a free port; Server.Addr reports it once the
	// server is ready.
	Addr string

	// LockOSThread locks the loop goroutine to its OS thread. Default false: on the
	// machines measured so far it made every wake-up from another goroutine (offload
	// results, timers, Post) far slower while mutual exclusion does not need it.
	LockOSThread bool

	// ReadHeaderTimeout is the longest time from the first byte of a request head to its
	// end; past it the client gets 408 and the connection closes, so a client trickling
	// header bytes (slowloris) cannot hold a connection for long. Zero means 10 s, generous
	// for any real client on a slow mobile link; negative means no limit.
	ReadHeaderTimeout time.Duration

	// IdleTimeout is the longest time a keep-alive connection may wait for the first byte
	// of its next request before the server closes it. Zero means 2 minutes: idle
	// connections cost little memory here, and two minutes outlasts the keep-alive timeouts
	// of common clients and load balancers (60 s), which should be the side that closes
	// first. Negative means no limit.
	IdleTimeout time.Duration

	// LingerTimeout is how long a connection the server is closing keeps draining client
	// bytes after its last response, so that the kernel does not answer unread bytes with a
	// reset that could destroy that response. Zero means 2 s; negative means the connection
	// closes as soon as its output is written.
	LingerTimeout time.Duration

	// Limits bounds request parsing (request line, header section, body size). Its zero
	// value gives httpcodec's documented defaults.
	Limits httpcodec.Config

	// RequestConcurrency caps the request handlers in flight at once (running or parked).
	// Requests past it wait in a FIFO queue of MaxQueueLength; past that they get 429 with
	// a Retry-After derived from the measured completion rate. Routes registered with
	// Exempt are not counted. Default 0: no limit.
	RequestConcurrency int

	// MaxQueueLength is how many requests may wait for a handler slot when
	// RequestConcurrency is set; a waiting request holds only its parsed request, no task.
	// Default 0: no queue, refuse at once.
	MaxQueueLength int

	// MultiThread runs each request handler in its own goroutine, in parallel, instead of
	// as a task on the loop. Handlers then must be safe for concurrent use (shared state
	// needs locks) but may block; the handler API, accounting and limits stay the same.
	// Background tasks (Go, Every) always run on the loop. Default false: single-thread
	// mode (see docs/concurrency.md).
	MultiThread bool

	// RequireSingleThread declares that the application's handlers rely on one thread
	// running them (they share state without locks): single-thread mode on one loop.
	// MultiThread and Shards above 1 are then errors, and so is an environment asking for
	// either (BATON_USE_SINGLE_THREAD=false, BATON_SHARDS=2 in FromEnv), instead of a silent
	// switch into data races. An application whose state is per loop (Ctx.Loop) leaves it
	// unset and may run shards.
	RequireSingleThread bool

	// HandlerTimeout is the longest a handler may run; then its context is cancelled
	// (context.DeadlineExceeded) and, if it wrote nothing yet, the client gets 503 at once
	// and the handler's later writes are dropped. Default 0: no limit (long polls are
	// normal in game backends; set one where they are not).
	HandlerTimeout time.Duration

	// WriteStallTimeout is how long a connection's unsent output may stay without any
	// progress (the client stopped reading) before the connection is dropped. Zero means
	// 30 s, which outlasts any network hiccup a live client survives; negative means never.
	WriteStallTimeout time.Duration

	// MaxOutputBytes bounds the unsent output buffered for one connection: past it the
	// server stops reading that connection's pipelined requests until the client catches
	// up. Streams park their handler well before it (256 KiB). Zero means 4 MiB: a fast
	// client pipelines freely, while 10,000 stalled clients cost 40 GiB only in the worst
	// case of every one of them stalling mid-response with huge bodies.
	MaxOutputBytes int

	// MaxBufferedInput bounds the unparsed request bytes held for one connection while one
	// of its requests is being handled (pipelining). Past it the connection is answered
	// up to the current request and closed. Zero means 4 MiB, which holds 10,000 typical
	// pipelined GETs.
	MaxBufferedInput int

	// StreamSendBuffer is the send buffer (SO_SNDBUF, bytes) a connection's socket gets
	// when it first streams a response (Ctx.Stream, a net/http handler's flushed body), so
	// that a slow reader's socket holds a bounded amount (the kernel doubles the value and
	// caps it at net.core.wmem_max) and a stream's writes park on backpressure early
	// instead of feeding the kernel megabytes. It stays set for the connection's later
	// responses. Zero means 128 KiB: a slow reader then holds at most about 256 KiB in the
	// kernel besides the stream's 256 KiB high-water mark in baton, where the kernel's
	// autotuning would let it take 4 MiB, and 128 KiB still moves 10 MB/s per stream at a
	// 25 ms round trip. Negative leaves the kernel's autotuning alone (for bulk downloads
	// over long round trips).
	StreamSendBuffer int

	// KeepFileLimit leaves RLIMIT_NOFILE as it is. By default ListenAndServe raises the
	// soft limit to the hard limit (every connection is a file descriptor) and logs a
	// warning when the hard limit is below 10,000.
	KeepFileLimit bool

	// KeepGOMAXPROCS leaves GOMAXPROCS as it is. By default ListenAndServe raises it to
	// Shards+1 when it is at most Shards (1 with one loop on one CPU) and the GOMAXPROCS
	// environment variable is not set: each loop waits for I/O in a system call, and a
	// spare P lets the runtime's timers and other goroutines run meanwhile without taking
	// a loop's P away (procs.go says why).
	KeepGOMAXPROCS bool

	// Offload configures the pool that runs blocking work off the loop (offload.Do with a
	// Ctx): tokens, lanes, predictor. Its zero value gives the offload package's defaults.
	Offload offload.Config

	// NoAccounting turns per-task, per-route and loop accounting off: no clock reads at
	// task switches, no histograms, no stall detector, no stats endpoints. Default false:
	// accounting is on (its cost is measured by BenchmarkAccountingCost and
	// BenchmarkServeNoIO).
	NoAccounting bool

	// OSClock reads every clock reading of the loop from the OS's monotonic clock. By
	// default, on amd64 where the kernel itself keeps time with the CPU's time-stamp
	// counter, the loop reads the counter instead (cheaper: the loop reads the clock at
	// every task switch), calibrated against the OS clock and re-anchored to it every
	// millisecond; its accuracy is stated in package internal/clock and measured in
	// docs/accounting.md. Default false.
	OSClock bool

	// RuntimeTimers wakes the idle loop for its timers (room ticks, Sleep, Every, Go's
	// deadlines) from a Go runtime timer, which fires up to about 1 ms late in an idle
	// process, instead of the default: on Linux a timerfd, with a 500 µs slack that lets
	// timers due together share one wake-up (docs/rooms.md, "The alarm"). Off Linux the
	// runtime timer is used either way. Default false.
	RuntimeTimers bool

	// StallThreshold is how long one task slice may hold the loop before the stall
	// detector logs it (task id, route, time so far and the task's stack) and counts it.
	// Zero means 100 ms: every other request waits that long behind such a task, far
	// beyond any latency budget of an interactive game backend, yet rare enough that
	// logging each one (rate-limited) is affordable. Negative turns the detector off.
	StallThreshold time.Duration

	// ServerTiming adds a Server-Timing header to every response with the request's
	// on-loop, queue and parked time so far (milliseconds). Default false.
	ServerTiming bool

	// CPUClock reads the loop thread's CPU clock at every slice start and end so tasks
	// report CPU time beside on-loop wall time. It needs LockOSThread (otherwise the
	// thread changes under the loop) and costs a system call at every slice start and
	// end (measured in docs/accounting.md), which is why it is off by default; without
	// LockOSThread, New logs a warning and CPU time is not measured.
	CPUClock bool

	// OnRequestDone, if set, is called on the loop when a request finishes (its response
	// complete, its figures final), with its record: see RequestRecord and
	// package loop/accesslog. It must not block or park. Default nil: nothing is called (the
	// cost is a nil check per request).
	OnRequestDone func(r *accounting.RequestRecord)

	// ProfileLabels sets the pprof label "route" (the route pattern) on a handler's
	// goroutine while it runs, so that a CPU profile splits by route. Default false: it
	// costs two label switches per request (measured in docs/ecosystem.md).
	ProfileLabels bool

	// Logger receives the server's logs (handler panics, timeouts, gnet errors).
	// Default slog.Default().
	Logger *slog.Logger

	// Shards is how many independent event loops the server runs in this process, each on
	// its own goroutine (and OS thread with LockOSThread) with its own scheduler, tasks,
	// connections, rooms, accounting and admission (RequestConcurrency and MaxQueueLength
	// apply per shard). Each shard listens on Addr with its own SO_REUSEPORT socket and
	// the kernel spreads connections over them; a connection stays on its shard. The
	// offload pool, the logger and the route table are shared (see docs/design.md,
	// "Shards"). It works in both modes (MultiThread runs each shard's handlers in
	// goroutines of their own). Zero means 1; at most 256: far more loops than cores is a
	// mistake (every loop is one core's worth of work).
	Shards int

	// TrustedProxies lists the proxies (addresses or CIDR prefixes: "10.0.0.0/8",
	// "127.0.0.1/32") whose Forwarded or X-Forwarded-For headers say who the client is:
	// for a request from one of them, Ctx.RemoteAddr (and so the access log, the limiter's
	// ratelimit.ByAddress and the net/http adapter's RemoteAddr) is the first address from
	// the right of those headers that is not a trusted proxy. A request from any other peer
	// keeps its peer's address, whatever its headers say. Default none: the peer is the
	// client (docs/deployment.md, "Behind a proxy").
	TrustedProxies []netip.Prefix
}

// withDefaults returns a copy of c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = defaultAddr
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = defaultReadHeaderTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = defaultIdleTimeout
	}
	if c.LingerTimeout == 0 {
		c.LingerTimeout = defaultLingerTimeout
	}
	if c.StallThreshold == 0 {
		c.StallThreshold = defaultStallThreshold
	}
	if c.WriteStallTimeout == 0 {
		c.WriteStallTimeout = defaultWriteStallTimeout
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = defaultMaxOutputBytes
	}
	if c.MaxBufferedInput == 0 {
		c.MaxBufferedInput = defaultMaxBufferedInput
	}
	if c.StreamSendBuffer == 0 {
		c.StreamSendBuffer = defaultStreamSendBuffer
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	return c
}

// Validate reports the first invalid field of c, naming it. The zero Config is valid.
// Safe for concurrent use.
func (c Config) Validate() error {
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			return fmt.Errorf("loop: Config.TrustedProxies[%d] (%v) is not a valid prefix", i, p)
		}
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			return fmt.Errorf("loop: Config.Addr %q: %w", c.Addr, err)
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"RequestConcurrency", int64(c.RequestConcurrency)},
		{"MaxQueueLength", int64(c.MaxQueueLength)},
		{"HandlerTimeout", int64(c.HandlerTimeout)},
		{"MaxOutputBytes", int64(c.MaxOutputBytes)},
		{"MaxBufferedInput", int64(c.MaxBufferedInput)},
	} {
		if f.v < 0 {
			return fmt.Errorf("loop: Config.%s must not be negative, got %d", f.name, f.v)
		}
	}
	if c.Shards < 0 || c.Shards > maxShards {
		return fmt.Errorf("loop: Config.Shards (%d) must be between 1 and %d (0 means 1)", c.Shards, maxShards)
	}
	if c.RequireSingleThread && c.MultiThread {
		return fmt.Errorf("loop: Config.MultiThread is set but Config.RequireSingleThread says the handlers rely on single-thread mode")
	}
	if c.RequireSingleThread && c.Shards > 1 {
		return fmt.Errorf("loop: Config.Shards (%d) runs handlers on several loops in parallel, but Config.RequireSingleThread says the handlers rely on one", c.Shards)
	}
	if c.StallThreshold > 0 && c.StallThreshold < recorder.MinStallThreshold {
		return fmt.Errorf("loop: Config.StallThreshold %v is below the detector's resolution %v (negative turns it off)", c.StallThreshold, recorder.MinStallThreshold)
	}
	if c.MaxQueueLength > 0 && c.RequestConcurrency == 0 {
		return fmt.Errorf("loop: Config.MaxQueueLength (%d) needs Config.RequestConcurrency: without a limit nothing ever queues", c.MaxQueueLength)
	}
	if err := c.Offload.Validate(); err != nil {
		var ce *offload.ConfigError
		if errors.As(err, &ce) {
			return errors.New("loop: " + ce.Describe("Config.Offload."))
		}
		return fmt.Errorf("loop: Config.Offload: %w", err)
	}
	if err := c.Limits.Validate(); err != nil {
		var ce *httpcodec.ConfigError
		if errors.As(err, &ce) {
			return fmt.Errorf("loop: Config.Limits.%s %s", ce.Field, ce.Reason)
		}
		return fmt.Errorf("loop: Config.Limits: %w", err)
	}
	return nil
}
