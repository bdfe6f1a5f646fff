package loadgen

import (
	"context"
	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func hostOf(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestOpenLoopStall: a server that stops answering for 200 ms once. The open-loop
// generator keeps sending on schedule, and because latency counts from the intended send
// time the stall appears in the tail (p99 and max) instead of vanishing.
func TestOpenLoopStall(t *testing.T) {
	const (
		stall    = 200 * time.Millisecond
		rate     = 500.0
		duration = 2 * time.Second
	)
	var (
		mu         sync.Mutex
		measuring  time.Time
		stalled    bool
		stallUntil time.Time
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if !stalled && !measuring.IsZero() && time.Since(measuring) > 600*time.Millisecond {
			stalled, stallUntil = true, time.Now().Add(stall)
		}
		until := stallUntil
		mu.Unlock()
		if d := time.Until(until); d > 0 {
			time.Sleep(d)
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	host := hostOf(t, srv)
	res, err := Run(context.Background(), Config{
		Groups: []Group{{
			Name: "stall", Addr: host, Mode: Open, Conns: 8, Rate: rate,
			Mix: []Request{NewRequest("get", 1, "GET", host, "/", nil)},
		}},
		Warmup:         300 * time.Millisecond,
		Duration:       duration,
		OnMeasureStart: func() { mu.Lock(); measuring = time.Now(); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	g := res.Groups[0]
	if !stalled {
		t.Fatal("the server never stalled")
	}
	want := rate * duration.Seconds()
	if math.Abs(float64(g.Sent)-want) > 0.03*want {
		t.Errorf("sent %d requests, want about %.0f (rate x duration)", g.Sent, want)
	}
	if g.ErrorCount() != 0 || g.Requests != g.Sent {
		t.Errorf("errors %v, %d responses to %d requests", g.Errors, g.Requests, g.Sent)
	}
	p99 := time.Duration(g.Latency.ValueAtQuantile(99)) * time.Microsecond
	maxLat := time.Duration(g.Latency.Max()) * time.Microsecond
	p50 := time.Duration(g.Latency.ValueAtQuantile(50)) * time.Microsecond
	t.Logf("sent %d, p50 %v, p99 %v, max %v", g.Sent, p50, p99, maxLat)
	// Requests due during the stall wait from 0 to 200 ms: 10% of the run, so p99 is about
	// 180 ms and max about 200 ms.
	if maxLat < stall*95/100 {
		t.Errorf("max %v, want at least the stall (%v)", maxLat, stall)
	}
	if p99 < stall*3/4 {
		t.Errorf("p99 %v, want most of the stall (%v)", p99, stall)
	}
	if p50 > 50*time.Millisecond {
		t.Errorf("p50 %v: the stall should not move the median", p50)
	}
}

// TestMerge: per-connection histograms merged equal one histogram of every value.
func TestMerge(t *testing.T) {
	total := NewHistogram()
	parts := make([]*hdrhistogram.Histogram, 10)
	for i := range parts {
		parts[i] = NewHistogram()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		v := int64(rng.ExpFloat64()*2000) + 1
		total.RecordValue(v)
		parts[rng.IntN(len(parts))].RecordValue(v)
	}
	merged := Merge(parts...)
	if !merged.Equals(total) {
		t.Fatalf("merged histogram differs: count %d vs %d, p99 %d vs %d",
			merged.TotalCount(), total.TotalCount(), merged.ValueAtQuantile(99), total.ValueAtQuantile(99))
	}
}

// TestClosedPipelinedMix: closed loop with pipelining and a 3:1 mix; the group's total
// histogram is the merge of its per-name histograms and counts every response.
func TestClosedPipelinedMix(t *testing.T) {
	var a, b atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/a", func(w http.ResponseWriter, r *http.Request) { a.Add(1); w.Write([]byte("a")) })
	mux.HandleFunc("/b", func(w http.ResponseWriter, r *http.Request) { b.Add(1); w.WriteHeader(404) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	host := hostOf(t, srv)
	res, err := Run(context.Background(), Config{
		Groups: []Group{{
			Name: "mix", Addr: host, Mode: Closed, Conns: 4, Pipeline: 4,
			Mix: []Request{NewRequest("a", 3, "GET", host, "/a", nil), NewRequest("b", 1, "GET", host, "/b", nil)},
		}},
		Warmup:   100 * time.Millisecond,
		Duration: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	g := res.Groups[0]
	na, nb := g.ByName["a"].TotalCount(), g.ByName["b"].TotalCount()
	if g.Latency.TotalCount() != na+nb || uint64(na+nb) != g.Requests || g.Requests == 0 {
		t.Fatalf("total %d, a %d, b %d, requests %d", g.Latency.TotalCount(), na, nb, g.Requests)
	}
	if frac := float64(na) / float64(na+nb); frac < 0.7 || frac > 0.8 {
		t.Errorf("share of a = %.3f, want 0.75", frac)
	}
	if g.Status[404] != uint64(nb) || g.Errors["status 404"] != uint64(nb) || g.Status[200] != uint64(na) {
		t.Errorf("status %v errors %v", g.Status, g.Errors)
	}
	if res.ClientCPU <= 0 || res.ClientCPUs <= 0 {
		t.Errorf("client CPU %v on %d CPUs", res.ClientCPU, res.ClientCPUs)
	}
}

// TestOpenPipelined: Open mode with several requests in flight per connection keeps its
// rate against a slow server.
func TestOpenPipelined(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		w.Write([]byte("slow"))
	}))
	defer srv.Close()
	host := hostOf(t, srv)
	res, err := Run(context.Background(), Config{
		Groups: []Group{{
			Name: "p", Addr: host, Mode: Open, Conns: 2, Rate: 400, Pipeline: 8,
			Mix: []Request{NewRequest("get", 1, "GET", host, "/", nil)},
		}},
		Warmup:   100 * time.Millisecond,
		Duration: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	g := res.Groups[0]
	// net/http answers pipelined requests one at a time: 5 ms each, 200/s per connection,
	// 400/s over two: just enough.
	if g.Sent < 380 || g.Sent > 420 || g.Requests+g.Errors[ErrTimeout] != g.Sent {
		t.Errorf("sent %d, responses %d, errors %v", g.Sent, g.Requests, g.Errors)
	}
}

// TestIdleAndSpread: idle connections stay up and answer at the end; connections spread
// over the window record their connect times.
func TestIdleAndSpread(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	host := hostOf(t, srv)
	mix := []Request{NewRequest("get", 1, "GET", host, "/", nil)}
	res, err := Run(context.Background(), Config{
		Groups: []Group{
			{Name: "idle", Addr: host, Mode: Idle, Conns: 50, Verify: true, Mix: mix},
			{Name: "spread", Addr: host, Mode: Open, Conns: 20, Rate: 40, ConnectSpread: 300 * time.Millisecond, Mix: mix},
		},
		Duration: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	idle, spread := res.Groups[0], res.Groups[1]
	if idle.Alive != 50 || idle.ErrorCount() != 0 {
		t.Errorf("idle: %d alive, errors %v", idle.Alive, idle.Errors)
	}
	if spread.Connect.TotalCount() != 20 || spread.ErrorCount() != 0 || spread.Requests < 20 {
		t.Errorf("spread: %d connects, %d requests, errors %v", spread.Connect.TotalCount(), spread.Requests, spread.Errors)
	}
}

func TestConfigErrors(t *testing.T) {
	mix := []Request{NewRequest("x", 1, "GET", "h", "/", nil)}
	if err := checkLoopback("127.0.0.1:1"); err != nil {
		t.Error(err)
	}
	if err := checkLoopback("[::1]:1"); err != nil {
		t.Error(err)
	}
	for _, cfg := range []Config{
		{},
		{Duration: time.Second},
		{Duration: time.Second, Groups: []Group{{Conns: 0, Mix: mix}}},
		{Duration: time.Second, Groups: []Group{{Conns: 1}}},
		{Duration: time.Second, Groups: []Group{{Conns: 1, Mode: Open, Mix: mix}}},
		{Duration: time.Second, Groups: []Group{{Addr: "10.1.2.3:80", Conns: 1, Mix: mix}}},
		{Duration: time.Second, Groups: []Group{{Addr: "example.com:80", Conns: 1, Mix: mix}}},
	} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func TestNewRequest(t *testing.T) {
	r := NewRequest("m", 2, "POST", "127.0.0.1:1", "/x", []byte("{}"), "X-A: 1")
	want := "POST /x HTTP/1.1\r\nHost: 127.0.0.1:1\r\nX-A: 1\r\nContent-Length: 2\r\n\r\n{}"
	if string(r.Raw) != want || r.Name != "m" || r.Weight != 2 {
		t.Errorf("got %q", r.Raw)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	ok := Group{Name: "g", Addr: "127.0.0.1:1", Conns: 1, Mix: []Request{NewRequest("r", 1, "GET", "x", "/", nil)}}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Groups: []Group{ok}}, "Config.Duration"},
		{Config{Duration: time.Second}, "Config.Groups is empty"},
		{Config{Duration: time.Second, Drain: -1, Groups: []Group{ok}}, "Config.Drain"},
		{Config{Duration: time.Second, Groups: []Group{ok, {Name: "b", Addr: "127.0.0.1:1", Mix: ok.Mix}}}, `Config.Groups[1] ("b").Conns`},
		{Config{Duration: time.Second, Groups: []Group{{Name: "o", Addr: "127.0.0.1:1", Conns: 1, Mix: ok.Mix, Mode: Open}}}, ".Rate"},
		{Config{Duration: time.Second, Groups: []Group{{Name: "r", Addr: "10.0.0.1:80", Conns: 1, Mix: ok.Mix}}}, ".Addr"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error naming %q", err, tc.want)
		}
	}
	if err := (Config{Duration: time.Second, Groups: []Group{ok}}).Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}
