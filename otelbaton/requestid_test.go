package otelbaton_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/accesslog"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/requestid"
	"github.com/batonrt/baton/otelbaton"
)

// TestRequestIDInSpanAndAccessLog: with package requestid's middleware (outside or inside
// the tracing one), each request's span has its id as baton.request_id and its access log
// line has it as request_id, the same id the response header carries: a caller's id, a
// generated one, and a panicking handler's (whose 500, written by the loop, has no header
// of the handler's). In both modes, with the SDK's in-memory
// exporter.
func TestRequestIDInSpanAndAccessLog(t *testing.T) {
	for _, mt := range []bool{false, true} {
		for _, outer := range []bool{true, false} {
			t.Run(fmt.Sprintf("multithread=%v/requestid-outer=%v", mt, outer), func(t *testing.T) {
				exp := tracetest.NewInMemoryExporter()
				tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				logs := &looptest.LogBuffer{}
				al, err := accesslog.New(slog.New(slog.NewJSONHandler(logs, nil)), accesslog.Options{RequestID: requestid.Get})
				require.NoError(t, err)
				rid, err := requestid.New(requestid.Config{})
				require.NoError(t, err)
				s := loop.New(looptest.Config(t, loop.Config{MultiThread: mt, OnRequestDone: al.Record}))
				trace := otelbaton.Middleware(otelbaton.WithTracerProvider(tp))
				if outer {
					s.Use(rid, trace, al.Middleware())
				} else {
					s.Use(trace, al.Middleware(), rid)
				}
				s.Handle("GET /x", func(c *loop.Ctx) { c.String(200, "x") })
				s.Handle("GET /panic", func(c *loop.Ctx) { panic("boom") })
				base := looptest.Start(t, s)

				cl := &http.Client{Timeout: 10 * time.Second}
				call := func(path, incoming string) string {
					req, err := http.NewRequest("GET", base+path, nil)
					require.NoError(t, err)
					if incoming != "" {
						req.Header.Set("X-Request-Id", incoming)
					}
					resp, err := cl.Do(req)
					require.NoError(t, err)
					require.NoError(t, resp.Body.Close())
					return resp.Header.Get("X-Request-Id")
				}
				want := map[string]string{} // id -> path
				assert.Equal(t, "caller-42", call("/x", "caller-42"))
				want["caller-42"] = "/x"
				gen := call("/x", "")
				require.NotEmpty(t, gen)
				want[gen] = "/x"
				call("/panic", "panic-1") // the loop's 500 for a panic carries none of the handler's headers
				want["panic-1"] = "/panic"
				cl.CloseIdleConnections()

				require.Eventually(t, func() bool { return len(exp.GetSpans()) == 3 }, 10*time.Second, time.Millisecond)
				got := map[string]string{}
				for _, sp := range exp.GetSpans().Snapshots() {
					id := attrs(sp)[otelbaton.AttrRequestID].AsString()
					got[id] = attrs(sp)["url.path"].AsString()
					if id == "panic-1" {
						assert.Equal(t, codes.Error, sp.Status().Code)
					}
				}
				assert.Equal(t, want, got, "spans' request ids")

				require.NoError(t, s.Shutdown(context.Background()))
				al.Close()
				got = map[string]string{}
				for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
					var rec struct {
						Path      string `json:"path"`
						RequestID string `json:"request_id"`
					}
					require.NoError(t, json.NewDecoder(bytes.NewReader([]byte(l))).Decode(&rec), l)
					got[rec.RequestID] = rec.Path
				}
				assert.Equal(t, want, got, "access log's request ids")
			})
		}
	}
}
