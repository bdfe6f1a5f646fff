// Command stdlib is examples/newcomer written on net/http, chi, gorilla/websocket,
// client_golang and OpenTelemetry's otelhttp instead of baton, feature for feature: a
// bearer-token check, a profile read from a slow database, a WebSocket lobby whose state is
// broadcast at 10 Hz, Prometheus metrics by route and OpenTelemetry traces named by route.
// ../lines_test.go counts the lines of both.
//
//	go run ./examples/newcomer/stdlib -addr 127.0.0.1:8080 -admin 127.0.0.1:8081
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tokens are the players' bearer tokens (a real app asks its identity provider).
var tokens = map[string]string{"alice-token": "alice", "bob-token": "bob"}

type playerKey struct{}

type profile struct {
	ID    string `json:"id"`
	Level int    `json:"level"`
}

// loadProfile is the slow database.
func loadProfile(ctx context.Context, id string) (profile, error) {
	_, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("newcomer").Start(ctx, "db.load")
	defer span.End()
	time.Sleep(20 * time.Millisecond)
	return profile{ID: id, Level: len(id)}, nil
}

// lobby is the game's state and its players' connections; run is the only writer to them.
type lobby struct {
	mu    sync.Mutex
	tick  uint64
	moves map[string]int
	conns map[*websocket.Conn]bool
}

func (l *lobby) run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		l.tick++
		b, _ := json.Marshal(map[string]any{"tick": l.tick, "moves": l.moves})
		msg, _ := websocket.NewPreparedMessage(websocket.TextMessage, b)
		for c := range l.conns {
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			if c.WritePreparedMessage(msg) != nil {
				delete(l.conns, c)
				c.Close()
			}
		}
		l.mu.Unlock()
	}
}

func (l *lobby) join(c *websocket.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns[c] = true
}

func (l *lobby) leave(c *websocket.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
}

func (l *lobby) move(player string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.moves[player]++
}

// newServer builds the game's handler and its admin handler (metrics); the lobby ticks
// until ctx is done.
func newServer(ctx context.Context, tp trace.TracerProvider) (http.Handler, http.Handler) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "http_requests_total",
		Help: "Requests finished, by route and status code."}, []string{"route", "code"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "http_request_duration_seconds",
		Help: "Request latency by route.", Buckets: prometheus.DefBuckets}, []string{"route"})
	reg.MustRegister(requests, latency)
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler { // metrics, and the span named by the route
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, req.ProtoMajor)
			next.ServeHTTP(ww, req)
			route := req.Method + " " + chi.RouteContext(req.Context()).RoutePattern()
			trace.SpanFromContext(req.Context()).SetName(route)
			requests.WithLabelValues(route, strconv.Itoa(ww.Status())).Inc()
			latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
		})
	}, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			player, ok := tokens[strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")]
			if !ok {
				http.Error(w, "401 Unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), playerKey{}, player)))
		})
	})
	lob := &lobby{moves: map[string]int{}, conns: map[*websocket.Conn]bool{}}
	go lob.run(ctx)
	r.Get("/profile/{id}", func(w http.ResponseWriter, req *http.Request) {
		p, err := loadProfile(req.Context(), chi.URLParam(req, "id"))
		if err != nil {
			http.Error(w, "503 Service Unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p)
	})
	upgrader := websocket.Upgrader{}
	r.Get("/play", func(w http.ResponseWriter, req *http.Request) {
		conn, err := upgrader.Upgrade(w, req, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		lob.join(conn)
		defer lob.leave(conn)
		player := req.Context().Value(playerKey{}).(string)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
			lob.move(player)
		}
	})
	admin := http.NewServeMux()
	admin.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return otelhttp.NewHandler(r, "http", otelhttp.WithTracerProvider(tp)), admin
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "game address")
	adminAddr := flag.String("admin", "127.0.0.1:8081", "metrics address")
	flag.Parse()
	exp, err := stdouttrace.New()
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	defer tp.Shutdown(context.Background())
	otel.SetTracerProvider(tp)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	public, admin := newServer(ctx, tp)
	go func() { log.Print(http.ListenAndServe(*adminAddr, admin)) }()
	srv := &http.Server{Addr: *addr, Handler: public}
	go func() {
		<-ctx.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
