package servers

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"
)

type answer struct {
	status      int
	contentType string
	body        string
}

func do(t *testing.T, client *http.Client, base, method, path string) answer {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

func jsonKeys(t *testing.T, body string) []string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestParity: the net/http baseline passes the same functional checks as baton for every
// scenario's routes: same status codes, content types and bodies (hog replies carry
// timings, so for them the JSON fields are compared instead of the values).
func TestParity(t *testing.T) {
	script := []struct {
		method, path string
		exact        bool // compare bodies byte for byte
	}{
		// plaintext (and idle-conns' traffic)
		{"GET", "/plaintext", true},
		// json: reads and writes of the shared game state
		{"GET", "/json/players/p1", true},
		{"POST", "/json/players/p1/move", true},
		{"POST", "/json/players/p1/move", true},
		{"GET", "/json/players/p1", true},
		{"GET", "/json/players/nobody", true},
		{"POST", "/json/players/newcomer/move", true},
		{"GET", "/json/players/newcomer", true},
		{"GET", "/json/players/p999", true},
		// cpu-hog
		{"GET", "/hog/spin", false},
		{"GET", "/hog/yield", false},
		{"GET", "/hog/stats", false},
		// slow-flood
		{"GET", "/flood/lanes/fast", true},
		{"GET", "/flood/lanes/slow", true},
		{"GET", "/flood/nolanes/fast", true},
		{"GET", "/flood/nolanes/slow", true},
		// reconnect-burst
		{"POST", "/burst/heartbeat/w1", true},
		{"POST", "/burst/heartbeat/w2", true},
		{"POST", "/burst/heartbeat/w1", true},
		{"POST", "/burst/request_task", true},
		{"GET", "/burst/stats", true},
	}
	results := map[string][]answer{}
	for _, target := range append(Targets, BatonNoAccounting) {
		srv, err := Start(target, "127.0.0.1:0", nil)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		client := &http.Client{Transport: &http.Transport{}}
		for _, s := range script {
			results[target] = append(results[target], do(t, client, "http://"+srv.Addr(), s.method, s.path))
		}
		gateChecks(t, target, "http://"+srv.Addr())
		client.CloseIdleConnections()
		if err := srv.Close(); err != nil {
			t.Errorf("%s: close: %v", target, err)
		}
	}
	b, n := results[Baton], results[NetHTTP]
	for i, s := range script {
		// Same answers as baton, but for the figures accounting measures.
		if a := results[BatonNoAccounting][i]; a.status != b[i].status || a.contentType != b[i].contentType || (s.exact && a.body != b[i].body) {
			t.Errorf("%s %s: baton-noacct %+v, baton %+v", s.method, s.path, a, b[i])
		}
	}
	for i, s := range script {
		if b[i].status != n[i].status || b[i].contentType != n[i].contentType {
			t.Errorf("%s %s: baton %d %q, net/http %d %q", s.method, s.path, b[i].status, b[i].contentType, n[i].status, n[i].contentType)
		}
		if s.exact && b[i].body != n[i].body {
			t.Errorf("%s %s: baton body %q, net/http body %q", s.method, s.path, b[i].body, n[i].body)
		}
		if !s.exact && !reflect.DeepEqual(jsonKeys(t, b[i].body), jsonKeys(t, n[i].body)) {
			t.Errorf("%s %s: baton fields %v, net/http fields %v", s.method, s.path, jsonKeys(t, b[i].body), jsonKeys(t, n[i].body))
		}
	}
	if b[0].body != Hello || b[0].status != 200 || !strings.HasPrefix(b[0].contentType, "text/plain") {
		t.Errorf("plaintext: %+v", b[0])
	}
	var moved PlayerReply
	if err := json.Unmarshal([]byte(b[4].body), &moved); err != nil || moved.Moves != 2 || moved.TotalMoves != 2 || moved.Players != Players {
		t.Errorf("json state after two moves: %+v %v", moved, err)
	}
	if b[5].status != 404 || b[7].status != 200 {
		t.Errorf("unknown player %d, created player %d", b[5].status, b[7].status)
	}

	// The hogs burn HogBurn each; baton's accounting shows the yielding one in slices.
	var spin, yield HogReply
	var stats HogStats
	json.Unmarshal([]byte(b[9].body), &spin)
	json.Unmarshal([]byte(b[10].body), &yield)
	json.Unmarshal([]byte(b[11].body), &stats)
	if spin.WallUs < HogBurn.Microseconds() || spin.MaxSliceUs < HogBurn.Microseconds() || spin.YieldEveryUs != 0 {
		t.Errorf("baton spin hog: %+v", spin)
	}
	if yield.Rounds < uint64(HogBurn/HogSlice) || yield.MaxSliceUs >= HogBurn.Microseconds()/2 || yield.YieldEveryUs != HogSlice.Microseconds() {
		t.Errorf("baton yielding hog: %+v", yield)
	}
	if stats.Count != 2 || stats.Yielding != 1 || stats.MaxSliceUs != spin.MaxSliceUs {
		t.Errorf("baton hog stats: %+v", stats)
	}
	if b[12].body != "fast" || b[13].body != "slow" || b[19].body != "{\"task\":1}\n" ||
		b[20].body != "{\"heartbeats\":3,\"workers\":2,\"tasks\":1,\"rejected\":0}\n" {
		t.Errorf("flood/burst bodies: %q %q %q %q", b[12].body, b[13].body, b[19].body, b[20].body)
	}
	var nstats HogStats
	json.Unmarshal([]byte(n[11].body), &nstats)
	if nstats.Count != 2 || nstats.Yielding != 1 {
		t.Errorf("net/http hog stats: %+v", nstats)
	}
}

func TestStartUnknown(t *testing.T) {
	if _, err := Start("nginx", "127.0.0.1:0", nil); err == nil {
		t.Error("no error for an unknown target")
	}
}

// gateChecks hammers request_task with more concurrent calls than the gate admits: the
// excess gets 429 with Retry-After at once.
func gateChecks(t *testing.T, target, base string) {
	const n = 4 * TaskGate
	type result struct {
		status     int
		retryAfter string
	}
	results := make(chan result, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			resp, err := http.Post(base+"/burst/request_task", "", nil)
			if err != nil {
				results <- result{}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- result{resp.StatusCode, resp.Header.Get("Retry-After")}
		}()
	}
	close(start)
	ok, busy := 0, 0
	for range n {
		r := <-results
		switch {
		case r.status == 200:
			ok++
		case r.status == 429 && r.retryAfter == "1":
			busy++
		default:
			t.Errorf("%s: request_task answered %d (Retry-After %q)", target, r.status, r.retryAfter)
		}
	}
	if ok == 0 || busy == 0 {
		t.Errorf("%s: %d concurrent request_task calls: %d admitted, %d refused; want both", target, n, ok, busy)
	}
}
