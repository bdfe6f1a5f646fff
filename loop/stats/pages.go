package stats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/batonrt/baton/loop"
)

// pageWait bounds how long a page waits for a loop to take its figures: a page of a
// stalled loop answers 503 rather than hang.
const pageWait = 10 * time.Second

// Mount serves srv's stats pages on srv itself under prefix (e.g. "/debug/baton"):
// GET prefix/{section} for every section of srv's stats registry (the engine's loop,
// routes, tasks, offload and admission, and every feature's, also one added later) as
// JSON or, where the section renders text, with ?format=text; prefix/tasks?stacks=1 adds
// each live task's goroutine stack; prefix/ is the live dashboard (one HTML page) and
// prefix/events its Server-Sent Events stream (one JSON frame per FrameInterval). The
// routes are loop.Exempt from admission control. Figures are copied on each loop and
// rendered off it, while the request's task waits. Call it before ListenAndServe, as
// srv.Handle requires; the pages then answer on the public port, so prefer Handler on an
// admin address in production (docs/observability.md). The first Mount or Handler of a
// server starts its dashboard's sampler: a goroutine that waits for srv to be ready,
// samples every FrameInterval and ends when srv stops (Done), so a server that is never
// started should be closed.
func Mount(srv *loop.Server, prefix string) {
	h := hubOf(srv)
	srv.Handle("GET "+prefix+"/", func(c *loop.Ctx) { c.Bytes(200, "text/html; charset=utf-8", dashboardHTML) }, loop.Exempt())
	srv.Handle("GET "+prefix+"/events", h.serveLoop, loop.Exempt())
	srv.Handle("GET "+prefix+"/{section}", func(c *loop.Ctx) {
		sec, ok := find(srv, c.PathValue("section"))
		if !ok {
			c.String(404, "404 Not Found\n")
			return
		}
		q, _ := url.ParseQuery(c.RawQuery()) // a malformed query keeps what parsed
		ctx := c.Context()
		f := loop.NewFuture[page](c.Loop())
		go func() { f.Resolve(sectionPage(ctx, srv, sec, q), nil) }() // gathers from every loop: not on one
		p, err := f.Await(c, 0)
		if err != nil {
			return // the request ended (the client went away, the server stops)
		}
		c.Bytes(p.code, p.ctype, p.body)
	}, loop.Exempt())
}

// Handler returns a net/http handler serving the same pages as Mount, for an admin
// listener (an http.Server on 127.0.0.1:6060, say), so that monitoring does not share the
// main port: a path ending in /{section} serves that section's page, one ending in / the
// dashboard and one ending in /events its stream (mount it on a prefix such as
// "/debug/baton/"). Figures are copied on each loop through Post and rendered on the
// net/http goroutine. Safe for concurrent use.
func Handler(srv *loop.Server) http.Handler {
	h := hubOf(srv)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		name := p[strings.LastIndexByte(p, '/')+1:]
		switch name {
		case "":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write(dashboardHTML)
			return
		case "events":
			h.serveHTTP(w, r)
			return
		}
		sec, ok := find(srv, name)
		if !ok {
			http.NotFound(w, r)
			return
		}
		pg := sectionPage(r.Context(), srv, sec, r.URL.Query())
		w.Header().Set("Content-Type", pg.ctype)
		w.WriteHeader(pg.code)
		_, _ = w.Write(pg.body)
	})
}

// page is a rendered stats page.
type page struct {
	code  int
	ctype string
	body  []byte
}

func textPage(code int, msg string) page {
	return page{code, "text/plain; charset=utf-8", []byte(msg)}
}

// sectionPage answers sec's page: its figures from every loop, as JSON (with several
// loops, the totals' object with a "shards" array of each loop's) or, with ?format=text
// and a Text renderer, as text. Not on a loop of srv.
func sectionPage(ctx context.Context, srv *loop.Server, sec loop.StatsSection, q url.Values) page {
	g, err := gather(ctx, srv, []loop.StatsSection{sec}, q, pageWait)
	switch {
	case err != nil && ctx.Err() != nil:
		return textPage(http.StatusServiceUnavailable, "request cancelled\n")
	case errors.Is(err, errLoopSlow):
		return textPage(http.StatusServiceUnavailable, "503 Service Unavailable: a loop did not answer within 10s (stalled?)\n")
	case err != nil:
		return textPage(http.StatusServiceUnavailable, "503 Service Unavailable: "+err.Error()+"\n")
	}
	total, err := g.total(0, sec)
	if err != nil {
		return textPage(http.StatusBadRequest, "400 Bad Request: "+err.Error()+"\n")
	}
	var per []any
	if len(g.per) > 1 {
		per = make([]any, len(g.per))
		for i := range g.per {
			per[i] = g.per[i][0]
		}
	}
	text := q.Get("format") == "text" && sec.Text != nil
	write := sec.JSON
	if text {
		write = sec.Text
	} else if write == nil {
		write = writeJSON
	}
	totalB, perB, err := renderEach(total, per, write)
	if err != nil {
		return textPage(http.StatusInternalServerError, "500 Internal Server Error: "+err.Error()+"\n")
	}
	switch {
	case text && per != nil:
		var b bytes.Buffer
		fmt.Fprintf(&b, "== total over %d shards ==\n", len(per))
		b.Write(totalB)
		for i, p := range perB {
			fmt.Fprintf(&b, "\n== shard %d ==\n", i)
			b.Write(p)
		}
		return page{http.StatusOK, "text/plain; charset=utf-8", b.Bytes()}
	case text:
		return page{http.StatusOK, "text/plain; charset=utf-8", totalB}
	case per != nil:
		out, err := spliceShards(totalB, perB)
		if err != nil {
			return textPage(http.StatusInternalServerError, "500 Internal Server Error: "+err.Error()+"\n")
		}
		return page{http.StatusOK, "application/json", out}
	}
	return page{http.StatusOK, "application/json", totalB}
}

// writeJSON is a section page's JSON when the section has no renderer of its own.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// renderEach renders the total and every loop's value with write.
func renderEach(total any, per []any, write func(io.Writer, any) error) ([]byte, [][]byte, error) {
	var b bytes.Buffer
	if err := write(&b, total); err != nil {
		return nil, nil, err
	}
	t := slices.Clone(b.Bytes())
	out := make([][]byte, len(per))
	for i, v := range per {
		b.Reset()
		if err := write(&b, v); err != nil {
			return nil, nil, err
		}
		out[i] = slices.Clone(b.Bytes())
	}
	return t, out, nil
}

// spliceShards adds to the JSON object total a "shards" array of the JSON objects per,
// each given a leading "shard" member with its index.
func spliceShards(total []byte, per [][]byte) ([]byte, error) {
	t := bytes.TrimSpace(total)
	if len(t) < 2 || t[0] != '{' || t[len(t)-1] != '}' {
		return nil, fmt.Errorf("stats: page is not a JSON object")
	}
	out := append([]byte(nil), bytes.TrimRight(t[:len(t)-1], " \n\t")...)
	if out[len(out)-1] != '{' {
		out = append(out, ',')
	}
	out = append(out, `"shards":[`...)
	for i, p := range per {
		p = bytes.TrimSpace(p)
		if len(p) < 2 || p[0] != '{' {
			return nil, fmt.Errorf("stats: loop %d's page is not a JSON object", i)
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = fmt.Appendf(out, `{"shard":%d`, i)
		if inner := bytes.TrimSpace(p[1 : len(p)-1]); len(inner) > 0 {
			out = append(out, ',')
			out = append(out, inner...)
		}
		out = append(out, '}')
	}
	out = append(out, "]}\n"...)
	if !json.Valid(out) {
		return nil, fmt.Errorf("stats: page with shards is not valid JSON")
	}
	return out, nil
}
