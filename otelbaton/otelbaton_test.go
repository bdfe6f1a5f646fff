package otelbaton_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/offload"
	"github.com/batonrt/baton/otelbaton"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestServerSpanParentsOffloadedSpan: a request whose handler sleeps on the loop and then
// offloads a function that starts a span of its own yields two spans: the server span,
// named by the route, continuing the caller's W3C trace, with the status and baton's
// figures (parked at least the sleep), and the offloaded function's span as its child.
// Over real sockets, in both modes, with the SDK's in-memory exporter.
func TestServerSpanParentsOffloadedSpan(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			s := loop.New(looptest.Config(t, loop.Config{MultiThread: mt}))
			s.Use(otelbaton.Middleware(otelbaton.WithTracerProvider(tp), otelbaton.WithPropagator(propagation.TraceContext{})))
			s.Handle("GET /players/{id}", func(c *loop.Ctx) {
				_ = c.Sleep(5 * time.Millisecond)
				_, err := offload.Do(c, func(ctx context.Context) (int, error) {
					_, span := tp.Tracer("db").Start(ctx, "SELECT player")
					span.End()
					return 0, nil
				})
				require.NoError(t, err)
				c.String(200, "alice")
			})
			s.Handle("GET /fail", func(c *loop.Ctx) { c.String(503, "no") })
			base := looptest.Start(t, s)

			const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			req, err := http.NewRequest("GET", base+"/players/7", nil)
			require.NoError(t, err)
			req.Header.Set("traceparent", parent)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, 200, resp.StatusCode)

			require.Eventually(t, func() bool { return len(exp.GetSpans()) == 2 }, 10*time.Second, time.Millisecond)
			spans := exp.GetSpans().Snapshots()
			var server, child sdktrace.ReadOnlySpan
			for _, sp := range spans {
				switch sp.Name() {
				case "GET /players/{id}":
					server = sp
				case "SELECT player":
					child = sp
				}
			}
			require.NotNil(t, server, "no server span: %v", spans)
			require.NotNil(t, child, "no span from the offloaded function")
			assert.Equal(t, trace.SpanKindServer, server.SpanKind())
			assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", server.SpanContext().TraceID().String(), "the caller's trace continues")
			assert.Equal(t, "00f067aa0ba902b7", server.Parent().SpanID().String())
			assert.Equal(t, server.SpanContext().TraceID(), child.SpanContext().TraceID())
			assert.Equal(t, server.SpanContext().SpanID(), child.Parent().SpanID(), "the offloaded span is the server span's child")
			a := attrs(server)
			assert.EqualValues(t, 200, a["http.response.status_code"].AsInt64())
			assert.Equal(t, "GET /players/{id}", a["http.route"].AsString())
			assert.Equal(t, "/players/7", a["url.path"].AsString())
			// The 5 ms sleep is parked time (the loop's clock and the timer's may differ by a few
			// µs: the bound internal/clock states).
			assert.GreaterOrEqual(t, a[otelbaton.AttrParked].AsFloat64(), 4.5, "the sleep and the offloaded call are parked time")
			assert.Greater(t, a[otelbaton.AttrOnLoop].AsFloat64(), 0.0)
			assert.GreaterOrEqual(t, a[otelbaton.AttrRounds].AsInt64(), int64(2), "the sleep ends one round")
			assert.Contains(t, a, otelbaton.AttrQueueDelay)
			assert.Equal(t, codes.Unset, server.Status().Code)

			exp.Reset()
			resp, err = http.Get(base + "/fail")
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Eventually(t, func() bool { return len(exp.GetSpans()) == 1 }, 10*time.Second, time.Millisecond)
			sp := exp.GetSpans().Snapshots()[0]
			assert.Equal(t, codes.Error, sp.Status().Code, "a 5xx is an error span")
			assert.EqualValues(t, 503, attrs(sp)["http.response.status_code"].AsInt64())
			assert.False(t, sp.Parent().IsValid(), "no traceparent: a new trace")
		})
	}
}
