// Package loadgen is baton-bench's HTTP/1.1 load generator: keep-alive connections driven
// closed-loop (as fast as responses return) or open-loop (at a fixed arrival rate, latency
// measured from the intended send time), with pipelining, weighted request mixes and
// HdrHistogram latencies.
//
// # Measuring
//
// A run has three stages. First every connection of the groups without a ConnectSpread is
// dialled (and, in Idle mode, sends one request). Then the warm-up runs the full load, but
// nothing it does is recorded. Then the measurement window of Config.Duration: a request
// counts if it was sent (Closed) or was due to be sent (Open) inside the window, and its
// response is waited for up to Config.Drain after the window, so a slow tail is recorded
// rather than cut off.
//
// Closed mode records service time: response time minus send time. It finds the maximum
// throughput, but its latencies hide stalls (a stalled server also stops the client from
// sending: coordinated omission).
//
// Open mode sends each connection's requests on a fixed schedule (the group's rate split
// evenly over its connections, connections offset from each other so that the group's
// requests are evenly spaced). When a response comes back after the next request was due,
// that request is sent at once and its latency counts from when it was due, as wrk2 does,
// so a server stall shows up in the percentiles in full. When the connection was free and
// only the client's timer woke late (Go timers are about 1 ms coarse when idle), latency
// counts from the actual send instead: that delay is the client's, not the server's; it is
// reported separately as the schedule slop.
//
// # Cost
//
// One goroutine per connection (two for Open mode with Pipeline > 1) on a raw net.Conn;
// request bytes are prebuilt; responses are parsed from one reused buffer (status line,
// Content-Length, chunked, Connection) with no allocation per request. Latencies go to a
// few mutex-guarded histogram shards per group, merged at the end.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Mode says how a group's connections send their requests.
type Mode int

const (
	// Closed sends each connection's next request (or batch of Pipeline requests) as soon as
	// the previous responses are read: maximum throughput.
	Closed Mode = iota
	// Open sends requests at a fixed total rate (Group.Rate) whatever the responses do, with
	// up to Pipeline requests in flight per connection; latency counts from the intended
	// send time.
	Open
	// Idle connects, sends one request during the set-up, then keeps the connection open
	// and silent until the end of the window; with Group.Verify each connection then sends
	// one more request to prove it is still alive.
	Idle
)

// String returns "closed", "open" or "idle".
func (m Mode) String() string {
	switch m {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case Idle:
		return "idle"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Request is one entry of a request mix.
type Request struct {
	// Name labels the latency histogram of this entry; entries sharing a name share it.
	Name string
	// Weight is the entry's relative frequency in the mix (at least 1).
	Weight int
	// Raw is the complete request as sent on the wire (see NewRequest).
	Raw []byte
}

// NewRequest builds a Request with a prebuilt HTTP/1.1 keep-alive request: method, path,
// Host, Content-Length when body is not nil, and extra headers given as "Name: value".
func NewRequest(name string, weight int, method, host, path string, body []byte, headers ...string) Request {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, host)
	for _, h := range headers {
		b.WriteString(h)
		b.WriteString("\r\n")
	}
	if body != nil || method == "POST" || method == "PUT" || method == "PATCH" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	raw := append([]byte(b.String()), body...)
	return Request{Name: name, Weight: weight, Raw: raw}
}

// Group is a set of connections driven the same way; a run may have several groups at once
// (for instance a light route hit at a fixed rate next to a heavy one).
type Group struct {
	// Name labels the group in results.
	Name string
	// Addr is the server's "host:port".
	Addr string
	// Mode is how requests are sent.
	Mode Mode
	// Conns is the number of connections (at least 1).
	Conns int
	// Rate is the total requests per second over the group's connections (Open mode).
	Rate float64
	// Pipeline is how many requests a connection may have in flight (default 1). In Closed
	// mode requests are written in batches of Pipeline with one write.
	Pipeline int
	// Mix is the weighted list of requests to send; each request is drawn at random by
	// weight.
	Mix []Request
	// ConnectSpread, when positive, makes the group's connections connect during the
	// measurement window, evenly spread over this time from its start (a fleet of clients
	// reconnecting), instead of before the warm-up. Their connect times are recorded and a
	// connection's Open schedule starts at its connect time.
	ConnectSpread time.Duration
	// Verify makes Idle connections send one request at the end of the window; the ones
	// answered with 2xx count as alive, the others as "idle-dead" errors.
	Verify bool
}

// Config is one load run.
type Config struct {
	// Groups run at the same time.
	Groups []Group
	// Warmup is the time the load runs before the measurement window; nothing in it is
	// recorded.
	Warmup time.Duration
	// Duration is the measurement window.
	Duration time.Duration
	// Drain is how long after the window responses to requests of the window are still
	// waited for; then connections are closed and the missing responses count as
	// "timeout" errors. Default 2 s.
	Drain time.Duration
	// DialTimeout bounds each connect. Default 5 s.
	DialTimeout time.Duration
	// MaxDialing bounds the connects in progress while dialling before the warm-up (so that
	// the server's accept queue does not overflow). Default 128.
	MaxDialing int
	// OnMeasureStart and OnMeasureEnd, if set, are called at the edges of the measurement
	// window (for sampling the server's CPU and memory). They run on the goroutine that
	// called Run.
	OnMeasureStart, OnMeasureEnd func()
}

// Validate reports the first invalid field of cfg, naming it (Config.Duration,
// Config.Groups[i].Conns, ...); Run calls it. Any goroutine.
func (cfg Config) Validate() error {
	if cfg.Duration <= 0 {
		return errors.New("loadgen: Config.Duration must be positive")
	}
	if len(cfg.Groups) == 0 {
		return errors.New("loadgen: Config.Groups is empty")
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Warmup", cfg.Warmup}, {"Drain", cfg.Drain}, {"DialTimeout", cfg.DialTimeout}} {
		if f.v < 0 {
			return fmt.Errorf("loadgen: Config.%s must not be negative, got %v", f.name, f.v)
		}
	}
	if cfg.MaxDialing < 0 {
		return fmt.Errorf("loadgen: Config.MaxDialing must not be negative, got %d", cfg.MaxDialing)
	}
	for i, g := range cfg.Groups {
		field := fmt.Sprintf("loadgen: Config.Groups[%d] (%q)", i, g.Name)
		if err := checkLoopback(g.Addr); err != nil {
			return fmt.Errorf("%s.Addr: %w", field, err)
		}
		switch {
		case g.Conns <= 0:
			return fmt.Errorf("%s.Conns must be positive, got %d", field, g.Conns)
		case len(g.Mix) == 0:
			return fmt.Errorf("%s.Mix is empty", field)
		case g.Mode == Open && g.Rate <= 0:
			return fmt.Errorf("%s.Rate must be positive in Open mode, got %v", field, g.Rate)
		case g.Pipeline < 0:
			return fmt.Errorf("%s.Pipeline must not be negative, got %d", field, g.Pipeline)
		}
	}
	return nil
}

// Error kinds counted in GroupResult.Errors besides "status NNN" (non-2xx responses).
const (
	ErrConnect  = "connect"   // dial failed
	ErrWrite    = "write"     // writing a request failed
	ErrRead     = "read"      // reading a response failed (other than the kinds below)
	ErrClosed   = "closed"    // the server closed or reset the connection
	ErrTimeout  = "timeout"   // no response by the end of the drain time
	ErrProtocol = "protocol"  // the response could not be parsed
	ErrMissed   = "missed"    // Open mode: a request due in the window was never sent
	ErrIdleDead = "idle-dead" // Idle mode with Verify: the connection no longer answered
)

var errKinds = []string{ErrConnect, ErrWrite, ErrRead, ErrClosed, ErrTimeout, ErrProtocol, ErrMissed, ErrIdleDead}

const (
	kConnect = iota
	kWrite
	kRead
	kClosed
	kTimeout
	kProtocol
	kMissed
	kIdleDead
	numKinds
)

// GroupResult is what one group measured in the window.
type GroupResult struct {
	// Name, Mode, Conns, Pipeline, Rate and ConnectSpread repeat the group's settings.
	Name          string
	Mode          Mode
	Conns         int
	Pipeline      int
	Rate          float64
	ConnectSpread time.Duration
	// Duration is the measurement window.
	Duration time.Duration
	// Sent counts requests sent (Closed) or due (Open) in the window that were written.
	Sent uint64
	// Requests counts responses received to those requests, whatever their status.
	Requests uint64
	// Status counts responses by status code.
	Status map[int]uint64
	// Errors counts failures by kind (the Err* constants) and non-2xx responses as
	// "status NNN". Zero counts are left out.
	Errors map[string]uint64
	// Latency holds every recorded response time in microseconds.
	Latency *hdrhistogram.Histogram
	// ByName holds the latencies per Request.Name.
	ByName map[string]*hdrhistogram.Histogram
	// Connect holds connect times in microseconds (groups with ConnectSpread).
	Connect *hdrhistogram.Histogram
	// Slop holds, for Open mode, how late the client's timer woke for requests due while
	// the connection was free (excluded from Latency; large values mean the client is
	// overloaded).
	Slop *hdrhistogram.Histogram
	// Alive counts Idle connections that answered at the end (with Verify).
	Alive uint64
}

// RPS returns responses per second in the window.
func (g *GroupResult) RPS() float64 {
	if g.Duration <= 0 {
		return 0
	}
	return float64(g.Requests) / g.Duration.Seconds()
}

// ErrorCount returns the sum of Errors.
func (g *GroupResult) ErrorCount() uint64 {
	var n uint64
	for _, v := range g.Errors {
		n += v
	}
	return n
}

// Result is what a run measured.
type Result struct {
	// Groups are in the order of Config.Groups.
	Groups []*GroupResult
	// Start and End bound the measurement window.
	Start, End time.Time
	// SetupTime is how long dialling before the warm-up took.
	SetupTime time.Duration
	// ClientCPU is the CPU time this process used in the window; ClientCPUs the CPUs it
	// could use.
	ClientCPU  time.Duration
	ClientCPUs int
}

// ClientUtilization returns the client's CPU use in the window as a fraction of the CPUs it
// may use (1 = all of them busy).
func (r *Result) ClientUtilization() float64 {
	wall := r.End.Sub(r.Start)
	if wall <= 0 || r.ClientCPUs <= 0 {
		return 0
	}
	return r.ClientCPU.Seconds() / (wall.Seconds() * float64(r.ClientCPUs))
}

// SaturationThreshold is the client CPU utilization from which Saturated reports true.
const SaturationThreshold = 0.9

// Saturated reports whether the load generator used (nearly) all of its CPUs, in which
// case it, not the server, may have limited the throughput.
func (r *Result) Saturated() bool { return r.ClientUtilization() >= SaturationThreshold }

// shard holds part of a group's figures; connections share shards to bound memory.
type shard struct {
	mu       sync.Mutex
	byName   []*hdrhistogram.Histogram
	connect  *hdrhistogram.Histogram
	slop     *hdrhistogram.Histogram
	status   [600]uint64
	errs     [numKinds]uint64
	sent     uint64
	received uint64
	alive    uint64
}

func (s *shard) addErr(kind int, n uint64) {
	s.mu.Lock()
	s.errs[kind] += n
	s.mu.Unlock()
}

const maxShards = 16

type groupRun struct {
	g        Group
	names    []string
	nameOf   []int    // mix index -> name index
	cum      []uint64 // cumulative weights
	total    uint64
	shards   []*shard
	interval int64 // Open: ns between one connection's requests
}

type run struct {
	cfg   Config
	ctx   context.Context
	base  time.Time
	start chan struct{} // closed once the times below are set
	ended chan struct{} // closed after OnMeasureEnd returned
	// ns since base: warm-up start, window start and end, hard stop.
	t0, ms, me, hard int64
	dialSem          chan struct{}
}

func (r *run) now() int64 { return int64(time.Since(r.base)) }

func (r *run) abs(ns int64) time.Time { return r.base.Add(time.Duration(ns)) }

// Run runs the load described by cfg and returns what it measured. It returns early with
// ctx's error if ctx ends.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 2 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.MaxDialing <= 0 {
		cfg.MaxDialing = 128
	}
	r := &run{cfg: cfg, ctx: ctx, base: time.Now(), start: make(chan struct{}), ended: make(chan struct{}), dialSem: make(chan struct{}, cfg.MaxDialing)}
	groups := make([]*groupRun, len(cfg.Groups))
	for i, g := range cfg.Groups {
		gr, err := newGroupRun(g)
		if err != nil {
			return nil, err
		}
		groups[i] = gr
	}

	var ready, done sync.WaitGroup
	for _, gr := range groups {
		for id := 0; id < gr.g.Conns; id++ {
			w := newWorker(r, gr, id)
			upfront := gr.g.ConnectSpread <= 0
			if upfront {
				ready.Add(1)
			}
			done.Add(1)
			go func() {
				defer done.Done()
				w.main(upfront, &ready)
			}()
		}
	}
	setup := time.Now()
	readyCh := make(chan struct{})
	go func() { ready.Wait(); close(readyCh) }()
	select {
	case <-readyCh:
	case <-ctx.Done():
	}
	res := &Result{SetupTime: time.Since(setup)}
	r.t0 = r.now()
	r.ms = r.t0 + int64(cfg.Warmup)
	r.me = r.ms + int64(cfg.Duration)
	r.hard = r.me + int64(cfg.Drain)
	close(r.start)

	sleepCtx(ctx, time.Duration(r.ms-r.now()))
	cpu0 := ProcessCPU()
	res.Start = time.Now()
	if cfg.OnMeasureStart != nil {
		cfg.OnMeasureStart()
	}
	sleepCtx(ctx, time.Duration(r.me-r.now()))
	res.ClientCPU = ProcessCPU() - cpu0
	res.End = time.Now()
	res.ClientCPUs = UsableCPUs()
	if cfg.OnMeasureEnd != nil {
		cfg.OnMeasureEnd()
	}
	close(r.ended)
	done.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, gr := range groups {
		res.Groups = append(res.Groups, gr.result(time.Duration(r.me-r.ms)))
	}
	return res, nil
}

func newGroupRun(g Group) (*groupRun, error) {
	if g.Pipeline <= 0 {
		g.Pipeline = 1
	}
	gr := &groupRun{g: g}
	index := map[string]int{}
	for _, m := range g.Mix {
		w := m.Weight
		if w < 1 {
			w = 1
		}
		gr.total += uint64(w)
		gr.cum = append(gr.cum, gr.total)
		i, ok := index[m.Name]
		if !ok {
			i = len(gr.names)
			index[m.Name] = i
			gr.names = append(gr.names, m.Name)
		}
		gr.nameOf = append(gr.nameOf, i)
	}
	n := min(g.Conns, maxShards)
	for range n {
		s := &shard{connect: NewHistogram(), slop: NewHistogram()}
		for range gr.names {
			s.byName = append(s.byName, NewHistogram())
		}
		gr.shards = append(gr.shards, s)
	}
	if g.Mode == Open {
		gr.interval = int64(float64(g.Conns) * 1e9 / g.Rate)
		if gr.interval < 1 {
			gr.interval = 1
		}
	}
	return gr, nil
}

func (gr *groupRun) result(window time.Duration) *GroupResult {
	g := gr.g
	res := &GroupResult{
		Name: g.Name, Mode: g.Mode, Conns: g.Conns, Pipeline: g.Pipeline, Rate: g.Rate,
		ConnectSpread: g.ConnectSpread, Duration: window,
		Status: map[int]uint64{}, Errors: map[string]uint64{}, ByName: map[string]*hdrhistogram.Histogram{},
		Connect: NewHistogram(), Slop: NewHistogram(),
	}
	var errs [numKinds]uint64
	for i, name := range gr.names {
		h := NewHistogram()
		for _, s := range gr.shards {
			h.Merge(s.byName[i])
		}
		res.ByName[name] = h
	}
	for _, s := range gr.shards {
		res.Connect.Merge(s.connect)
		res.Slop.Merge(s.slop)
		res.Sent += s.sent
		res.Requests += s.received
		res.Alive += s.alive
		for code, n := range s.status {
			if n > 0 {
				res.Status[code] += n
			}
		}
		for k, n := range s.errs {
			errs[k] += n
		}
	}
	hs := make([]*hdrhistogram.Histogram, 0, len(res.ByName))
	for _, name := range gr.names {
		hs = append(hs, res.ByName[name])
	}
	res.Latency = Merge(hs...)
	for k, n := range errs {
		if n > 0 {
			res.Errors[errKinds[k]] = n
		}
	}
	for code, n := range res.Status {
		if code < 200 || code > 299 {
			res.Errors["status "+strconv.Itoa(code)] += n
		}
	}
	return res
}

// ErrorKinds returns the kinds of GroupResult.Errors other than "status NNN", in a fixed
// order.
func ErrorKinds() []string { return append([]string(nil), errKinds...) }

// SortedNames returns the keys of m in order.
func SortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkLoopback refuses addresses other than loopback ones: the generator is for measuring
// servers on this machine, never for loading a network.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s is not a loopback address (127.0.0.0/8, ::1 or localhost)", addr)
	}
	return nil
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// errKind classifies a transport error.
func errKind(err error) int {
	var ne net.Error
	switch {
	case errors.Is(err, errProtocol), errors.Is(err, errTooLarge):
		return kProtocol
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return kTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return kClosed
	}
	return kRead
}
