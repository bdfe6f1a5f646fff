// Package otelbaton traces baton requests with OpenTelemetry: a middleware that starts a
// server span per request, named by its route, continues the caller's trace from W3C
// trace-context headers, records the response status and baton's own figures (time on the
// loop, queue delay, parked time, rounds) as span attributes, and makes the span the
// parent of spans started in offloaded functions (offload.Do hands them the request's
// context). A request's id (package loop/requestid) is the span's baton.request_id.
//
// It is a module of its own, so that importers of loop do not get OpenTelemetry in their
// module graph.
package otelbaton

import (
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/requestid"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/batonrt/baton/otelbaton"

// The attributes baton adds to a request's span, beside the HTTP semantic conventions'.
const (
	AttrOnLoop     = attribute.Key("baton.on_loop_ms")     // time the handler ran (on the loop, or its goroutine's stretches)
	AttrQueueDelay = attribute.Key("baton.queue_delay_ms") // time waiting to run: admission queue and ready queue
	AttrParked     = attribute.Key("baton.parked_ms")      // time parked: sleeping, waiting, offloaded
	AttrRounds     = attribute.Key("baton.rounds")         // times the handler was scheduled
	AttrLoop       = attribute.Key("baton.loop")           // the index of the loop that ran it
	AttrRequestID  = attribute.Key("baton.request_id")     // the request's id (package loop/requestid), when it has one
)

// Option configures Middleware.
type Option func(*config)

type config struct {
	tp   trace.TracerProvider
	prop propagation.TextMapPropagator
}

// WithTracerProvider sets the provider the spans come from (default: otel's global one).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithPropagator sets how trace context is read from request headers (default: otel's
// global propagator, W3C trace context unless the program set another).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

// Middleware returns a loop.Middleware that traces each request: a server span named by
// the route ("GET /players/{id}", or the method alone when no route matched), the
// caller's trace continued from the request's headers, and the span set as the request's
// context (Ctx.SetContext), so that spans started from c.Context() or in offloaded
// functions are its children. When the handler returns, the span gets the status (an
// error status for 5xx), baton's figures and the request's id (when the middleware of
// package loop/requestid gave it one, inside or outside this one), and ends. Mount it with Server.Use before the
// routes. Safe for concurrent use; each request's span is its handler's.
func Middleware(opts ...Option) loop.Middleware {
	cfg := config{}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.prop == nil {
		cfg.prop = otel.GetTextMapPropagator()
	}
	tracer := cfg.tp.Tracer(ScopeName)
	return func(next loop.HandlerFunc) loop.HandlerFunc {
		return func(c *loop.Ctx) {
			ctx := cfg.prop.Extract(c.Context(), headers{c})
			name := c.Route()
			if name == "" {
				name = c.Method()
			}
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(
					attribute.String("http.request.method", c.Method()),
					attribute.String("url.path", c.Path()),
					attribute.String("http.route", c.Route()),
					attribute.Int(string(AttrLoop), c.Loop().Index()),
				))
			c.SetContext(ctx)
			defer func() {
				st := c.Task.Stats()
				status := c.Status()
				if status == 0 {
					status = 200 // a handler that writes nothing gets an empty 200
				}
				if id := requestid.Get(c); id != "" {
					span.SetAttributes(AttrRequestID.String(id))
				}
				if v := recover(); v != nil {
					span.SetStatus(codes.Error, "panic")
					span.End()
					panic(v) // the loop answers 500 and logs it
				}
				span.SetAttributes(
					attribute.Int("http.response.status_code", status),
					AttrOnLoop.Float64(ms(st.OnLoop)),
					AttrQueueDelay.Float64(ms(st.QueueDelay)),
					AttrParked.Float64(ms(st.ParkedTotal())),
					AttrRounds.Int64(int64(st.Rounds)),
				)
				if status >= 500 {
					span.SetStatus(codes.Error, strconv.Itoa(status))
				}
				span.End()
			}()
			next(c)
		}
	}
}

func ms[D ~int64](d D) float64 { return float64(d) / 1e6 }

// headers reads a request's headers for the propagator.
type headers struct{ c *loop.Ctx }

func (h headers) Get(key string) string { return h.c.Header(key) }

// Set does nothing: a request's headers are read-only.
func (headers) Set(string, string) {}

func (h headers) Keys() []string {
	var keys []string
	for k := range h.c.Headers() {
		keys = append(keys, k)
	}
	return keys
}
