package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// HandleStats and StatsHandler serve the stats registry's pages (prefix/{section}) for
// this package's own tests: a small stand-in for package loop/stats, which imports loop,
// so these tests cannot use it. loop/stats's tests cover the real pages, the snapshot and
// the dashboard.
func (s *Server) HandleStats(prefix string) {
	s.Handle("GET "+prefix+"/{section}", func(c *Ctx) {
		q, _ := url.ParseQuery(c.RawQuery())
		ctx, name := c.Context(), c.PathValue("section") // on the handler's goroutine
		var code int
		var body []byte
		c.srv.mode.offLoop(c, func() { code, body = s.testPage(ctx, name, q) })
		ctype := "application/json"
		if q.Get("format") == "text" {
			ctype = "text/plain; charset=utf-8"
		}
		c.Bytes(code, ctype, body)
	}, Exempt())
}

func (s *Server) StatsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		code, body := s.testPage(r.Context(), name, r.URL.Query())
		if r.URL.Query().Get("format") == "text" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(code)
		_, _ = w.Write(body)
	})
}

// testPage gathers section name from every loop and renders it: the totals and, with
// several loops, each loop's figures ("shards" in JSON, blocks in text).
func (s *Server) testPage(ctx context.Context, name string, q url.Values) (int, []byte) {
	var sec StatsSection
	for _, x := range s.StatsSections() {
		if x.Name == name {
			sec = x
		}
	}
	if sec.Name == "" {
		return 404, []byte("404 Not Found\n")
	}
	var per []any
	for _, l := range s.Loops() {
		type res struct {
			v   any
			err error
		}
		r, err := askLoop(ctx, l.srv, statsWait, func() res { v, err := sec.Take(l, q); return res{v, err} })
		if err == nil {
			err = r.err
		}
		if err != nil {
			return 400, []byte(err.Error())
		}
		if sec.Read != nil {
			r.v = sec.Read(r.v)
		}
		per = append(per, r.v)
	}
	total := per[0]
	if len(per) > 1 && sec.Sum != nil {
		total = sec.Sum(per)
	}
	text := q.Get("format") == "text" && sec.Text != nil
	render := func(v any) []byte {
		var b bytes.Buffer
		switch {
		case text:
			_ = sec.Text(&b, v)
		case sec.JSON != nil:
			_ = sec.JSON(&b, v)
		default:
			enc := json.NewEncoder(&b)
			enc.SetIndent("", "  ")
			_ = enc.Encode(v)
		}
		return b.Bytes()
	}
	out := render(total)
	if len(per) == 1 {
		return 200, out
	}
	if text {
		for i, v := range per {
			out = append(fmt.Appendf(out, "\n== shard %d ==\n", i), render(v)...)
		}
		return 200, out
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		return 500, []byte(err.Error())
	}
	shards := make([]map[string]any, len(per))
	for i, v := range per {
		if err := json.Unmarshal(render(v), &shards[i]); err != nil {
			return 500, []byte(err.Error())
		}
		shards[i]["shard"] = i
	}
	doc["shards"] = shards
	out, _ = json.Marshal(doc)
	return 200, out
}
