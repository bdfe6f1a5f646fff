package promexport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The files of deploy/: the Grafana dashboard, the alert rules and their unit tests.
const (
	dashboardFile  = "deploy/grafana-dashboard.json"
	alertsFile     = "deploy/alerts.yml"
	alertTestsFile = "deploy/alerts_test.yml"
)

// The alert rules pass `promtool check rules`, their unit tests pass `promtool test
// rules`, and every alert has a test that makes it fire.
func TestAlertRules(t *testing.T) {
	promtool(t)
	exit, out := runPromtool(t, "", "check", "rules", alertsFile)
	require.Equal(t, 0, exit, out)
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(read(t, alertsFile), -1)
	require.Contains(t, out, fmt.Sprintf("SUCCESS: %d rules found", len(alerts)))

	exit, out = runPromtool(t, "", "test", "rules", alertTestsFile)
	require.Equal(t, 0, exit, out)
	require.Contains(t, out, "SUCCESS")

	// An alert is tested when some eval_time expects it to fire (exp_alerts not empty).
	tests := read(t, alertTestsFile)
	fired := regexp.MustCompile(`alertname: (\w+)\n\s*exp_alerts:\n`).FindAllStringSubmatch(tests, -1)
	var tested []string
	for _, m := range fired {
		tested = append(tested, m[1])
	}
	for _, a := range alerts {
		assert.Contains(t, tested, a[1], "no test of %s firing in %s", a[1], alertTestsFile)
	}
	t.Logf("%d alert rules, %d expectations of firing", len(alerts), len(tested))
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) (dashboard, []panel) {
	t.Helper()
	var d dashboard
	require.NoError(t, json.Unmarshal([]byte(read(t, dashboardFile)), &d))
	var all []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return d, all
}

// promQL returns a dashboard query as Prometheus would get it from Grafana: the
// template variables replaced by values of their kind.
func promQL(expr string) string {
	r := strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$__interval", "1m",
		"$job", ".*", "$instance", ".*", "$route", ".*")
	return r.Replace(expr)
}

// The dashboard is a Grafana dashboard whose every panel has a place, a data source and
// queries, and whose every query is valid PromQL (promtool check rules, on a rule file
// made of them).
func TestDashboard(t *testing.T) {
	d, all := loadDashboard(t)
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Title)
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	assert.Equal(t, []string{"datasource", "job", "instance", "route"}, vars)

	ids := map[int]bool{}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	queries := 0
	for _, p := range all {
		assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		require.NotNil(t, p.GridPos, p.Title)
		assert.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, p.Title)
		assert.NotEmpty(t, p.Title)
		if p.Type == "row" {
			continue
		}
		require.NotNil(t, p.Datasource, p.Title)
		assert.Equal(t, "${datasource}", p.Datasource.UID, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, p.Title)
			q, err := json.Marshal(promQL(tg.Expr)) // a JSON string is a YAML string
			require.NoError(t, err)
			fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", queries, q)
			queries++
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	require.NoError(t, os.WriteFile(path, []byte(rules.String()), 0o644))
	promtool(t)
	exit, out := runPromtool(t, "", "check", "rules", path)
	require.Equal(t, 0, exit, "%s\n%s", out, rules.String())
	require.Contains(t, out, fmt.Sprintf("SUCCESS: %d rules found", queries))
	t.Logf("%d panels, %d queries, all valid PromQL", len(all), queries)
}

// metricName matches the metric names the deploy files use.
var metricName = regexp.MustCompile(`\b(?:baton|go|process)_[a-z0-9_]*[a-z0-9]`)

// Every metric the dashboard, the alert rules and their tests name is one a live server's
// scrape has: a server with traffic on every kind of route, rooms, a gate, offloaded work
// and a WebSocket session that ended.
func TestDeployNamesExported(t *testing.T) {
	f := newFlagship(t)
	f.play(t, 2)
	scrape := adminScrape(t, Registry(f.srv))
	mfs := waitFor(t, scrape, "the WebSocket session counted", func(mfs map[string]*dto.MetricFamily) bool {
		mf := mfs["baton_websocket_session_seconds"]
		return mf != nil && len(mf.Metric) == 1 && mf.Metric[0].GetHistogram().GetSampleCount() == 1
	})
	exported := func(name string) bool {
		if mfs[name] != nil {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && mfs[base] != nil {
				typ := mfs[base].GetType()
				return typ == dto.MetricType_HISTOGRAM || (suffix != "_bucket" && typ == dto.MetricType_SUMMARY)
			}
		}
		return false
	}
	for _, file := range []string{dashboardFile, alertsFile, alertTestsFile} {
		names := metricName.FindAllString(read(t, file), -1)
		slices.Sort(names)
		names = slices.Compact(names)
		require.NotEmpty(t, names, file)
		for _, n := range names {
			if strings.HasPrefix(n, "process_") && runtime.GOOS != "linux" {
				continue // the process collector reads /proc
			}
			assert.True(t, exported(n), "%s uses %s, which the server does not export", file, n)
		}
		t.Logf("%s: %d metric names, all exported", file, len(names))
	}
}

// A real Prometheus (Debian's prometheus package, the same as promtool's) scrapes a live
// server every 250 ms with the alert rules loaded: every dashboard query returns series
// from what it scraped, and every rule evaluates without error. Skips where the binary is
// missing. It takes about 5 s: Prometheus applies new scrape targets 5 s after start.
func TestDeployOnPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server")
	}
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not found (apt-get install prometheus): " + err.Error())
	}
	f := newFlagship(t)
	f.play(t, 2)
	admin := httptest.NewServer(promhttp.HandlerFor(Registry(f.srv), promhttp.HandlerOpts{}))
	t.Cleanup(admin.Close)

	// A free loopback port for Prometheus's API.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	promAddr := ln.Addr().String()
	require.NoError(t, ln.Close())
	rules, err := filepath.Abs(alertsFile)
	require.NoError(t, err)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 250ms
  scrape_timeout: 250ms
  evaluation_interval: 250ms
rule_files: [%q]
scrape_configs:
  - job_name: baton
    static_configs:
      - targets: [%q]
`, rules, strings.TrimPrefix(admin.URL, "http://"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644))
	var log bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus's log:\n%s", log.String())
		}
	})

	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	type result struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	api := func(path string, q url.Values, data any) (result, error) {
		var r result
		resp, err := cl.Get("http://" + promAddr + path + "?" + q.Encode())
		if err != nil {
			return r, err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
			return r, err
		}
		return r, json.Unmarshal(r.Data, data)
	}
	type vector struct {
		Result []json.RawMessage `json:"result"`
	}
	query := func(expr string) (result, vector, error) {
		var v vector
		r, err := api("/api/v1/query", url.Values{"query": {expr}}, &v)
		return r, v, err
	}
	// Ready once a rate over the scraped counters has two samples, and the traffic (a
	// WebSocket session among it) has been scraped since it ended.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, v, err := query(`rate(baton_loop_busy_seconds_total[1m]) and on () sum(baton_websocket_session_seconds_count) == 1`)
		if err == nil && r.Status == "success" && len(v.Result) > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "Prometheus has no rate after 30 s (%v)", err)
		time.Sleep(50 * time.Millisecond)
	}

	_, all := loadDashboard(t)
	queries := 0
	for _, p := range all {
		for _, tg := range p.Targets {
			// An instant query of a gauge finds nothing right after a scrape that failed
			// (Prometheus marks the target's series stale; a scrape under -race on a
			// loaded machine can pass its timeout): ask again until a later scrape
			// succeeded, for at most 10 s.
			var r result
			var v vector
			var err error
			start := time.Now()
			for {
				r, v, err = query(promQL(tg.Expr))
				require.NoError(t, err)
				require.Equal(t, "success", r.Status, "%s: %s: %s", p.Title, tg.Expr, r.Error)
				if len(v.Result) > 0 || time.Since(start) > 10*time.Second {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			assert.NotEmpty(t, v.Result, "%s: %s returns no series", p.Title, tg.Expr)
			queries++
		}
	}
	for _, v := range []string{`baton_build_info`, `baton_http_requests_total`} {
		var series []json.RawMessage
		_, err := api("/api/v1/series", url.Values{"match[]": {v}}, &series)
		require.NoError(t, err)
		assert.NotEmpty(t, series, "the template variables' %s", v)
	}

	// The rules have been evaluated (each at least once) and none failed.
	deadline = time.Now().Add(10 * time.Second)
	for {
		var rules struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		_, err := api("/api/v1/rules", nil, &rules)
		require.NoError(t, err)
		n, ok := 0, 0
		for _, g := range rules.Groups {
			for _, rule := range g.Rules {
				n++
				assert.NotEqual(t, "err", rule.Health, "%s: %s", rule.Name, rule.LastError)
				if rule.Health == "ok" {
					ok++
				}
			}
		}
		if n > 0 && ok == n {
			t.Logf("Prometheus: %d dashboard queries returned series; %d rules evaluated, none failed", queries, n)
			break
		}
		require.True(t, time.Now().Before(deadline), "%d of %d rules evaluated after 10 s", ok, n)
		time.Sleep(50 * time.Millisecond)
	}
}
