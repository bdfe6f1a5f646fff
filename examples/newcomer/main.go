// Command newcomer is a small game backend as a new user writes it from baton's README and
// go doc: a bearer-token check in front of every public route, a profile read from a slow
// database through the offload pool, a WebSocket lobby whose state a room broadcasts to its
// players at 10 Hz, Prometheus metrics and OpenTelemetry traces. Its twin on net/http, chi,
// gorilla/websocket, client_golang and otelhttp is ./stdlib; lines_test.go counts both.
//
//	go run ./examples/newcomer -addr 127.0.0.1:8080 -admin 127.0.0.1:8081
//	curl -H 'Authorization: Bearer alice-token' http://127.0.0.1:8080/profile/7
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
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/room"
	"github.com/batonrt/baton/loop/ws"
	"github.com/batonrt/baton/offload"
	"github.com/batonrt/baton/otelbaton"
	"github.com/batonrt/baton/promexport"
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

// lobby is the game's state, touched only by the room's tick: no lock.
type lobby struct {
	Tick  uint64         `json:"tick"`
	Moves map[string]int `json:"moves"`
}

// newServer builds the game server on addr and its admin handler (metrics).
func newServer(addr string, tp trace.TracerProvider) (*loop.Server, http.Handler) {
	srv := loop.New(loop.Config{Addr: addr, RequireSingleThread: true})
	srv.Use(otelbaton.Middleware(otelbaton.WithTracerProvider(tp)), func(next loop.HandlerFunc) loop.HandlerFunc {
		return func(c *loop.Ctx) {
			player, ok := tokens[strings.TrimPrefix(c.Header("Authorization"), "Bearer ")]
			if !ok {
				c.String(401, "401 Unauthorized\n")
				return
			}
			c.SetValue(playerKey{}, player)
			next(c)
		}
	})
	var lob *room.Room[string]
	srv.OnStart(func(l *loop.Loop) (err error) {
		state := lobby{Moves: map[string]int{}}
		lob, err = room.New(l, room.Config[string]{Name: "lobby", Period: 100 * time.Millisecond,
			Tick: func(r *room.Room[string], t *room.Tick[string]) {
				t.DrainInputs(func(player string) { state.Moves[player]++ })
				state.Tick = t.N
				b, _ := json.Marshal(state)
				room.Broadcast(r, ws.NewPrepared(false, b))
			}})
		return err
	})
	srv.Handle("GET /profile/{id}", func(c *loop.Ctx) {
		id := c.PathValue("id")
		p, err := offload.Do(c, func(ctx context.Context) (profile, error) { return loadProfile(ctx, id) })
		if err != nil {
			c.String(503, "503 Service Unavailable\n")
			return
		}
		c.JSON(200, p)
	})
	srv.Handle("GET /play", func(c *loop.Ctx) {
		conn, err := ws.Upgrade(c, ws.Config{})
		if err != nil || lob.AttachConn(&c.Task, conn) != nil {
			return
		}
		player := c.Value(playerKey{}).(string)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
			_ = lob.Input(player)
		}
	})
	admin := http.NewServeMux()
	admin.Handle("/metrics", promhttp.HandlerFor(promexport.Registry(srv), promhttp.HandlerOpts{}))
	return srv, admin
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
	srv, admin := newServer(*addr, tp)
	go func() { log.Print(http.ListenAndServe(*adminAddr, admin)) }()
	go func() {
		<-ctx.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, loop.ErrServerClosed) {
		log.Fatal(err)
	}
}
