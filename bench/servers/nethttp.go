package servers

import (
	"context"
	"encoding/json"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// startNetHTTP serves the routes the idiomatic net/http way: a goroutine per connection,
// the game state and the hog totals behind a mutex.
func startNetHTTP(addr string, logger *slog.Logger) (*Running, error) {
	var (
		mu   sync.Mutex
		g    = newGame()
		hogs HogStats
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /plaintext", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte(Hello))
	})
	mux.HandleFunc("GET /json/players/{id}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reply, ok := g.get(r.PathValue("id"))
		mu.Unlock()
		if !ok {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(404)
			w.Write([]byte("unknown player\n"))
			return
		}
		writeJSON(w, reply)
	})
	mux.HandleFunc("POST /json/players/{id}/move", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reply := g.move(r.PathValue("id"))
		mu.Unlock()
		writeJSON(w, reply)
	})
	hog := func(w http.ResponseWriter, yieldEvery time.Duration) {
		start := time.Now()
		burn(HogBurn) // no loop to yield to: the goroutine just burns
		reply := HogReply{BurnUs: HogBurn.Microseconds(), YieldEveryUs: yieldEvery.Microseconds(), WallUs: time.Since(start).Microseconds()}
		mu.Lock()
		hogs.add(reply)
		mu.Unlock()
		writeJSON(w, reply)
	}
	mux.HandleFunc("GET /hog/spin", func(w http.ResponseWriter, r *http.Request) { hog(w, 0) })
	mux.HandleFunc("GET /hog/yield", func(w http.ResponseWriter, r *http.Request) { hog(w, HogSlice) })
	mux.HandleFunc("GET /hog/stats", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := hogs
		mu.Unlock()
		writeJSON(w, s)
	})

	// slow-flood: a database/sql-like pool of FloodTokens connections per route family;
	// callers wait for one without bound (net/http has no lanes: both families are alike).
	lanes, noLanes := make(dbPool, FloodTokens), make(dbPool, FloodTokens)
	flood := func(pool dbPool, d time.Duration, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := pool.call(r.Context(), d); err != nil {
				return // the client went away
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Write([]byte(body))
		}
	}
	mux.HandleFunc("GET /flood/lanes/fast", flood(lanes, FastCall, "fast"))
	mux.HandleFunc("GET /flood/lanes/slow", flood(lanes, SlowCall, "slow"))
	mux.HandleFunc("GET /flood/nolanes/fast", flood(noLanes, FastCall, "fast"))
	mux.HandleFunc("GET /flood/nolanes/slow", flood(noLanes, SlowCall, "slow"))

	// reconnect-burst: heartbeats into a map behind the mutex, request_task behind a
	// channel semaphore tried without waiting.
	seen := map[string]time.Time{}
	var burst BurstStats
	gate := make(chan struct{}, TaskGate)
	mux.HandleFunc("POST /burst/heartbeat/{worker}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.PathValue("worker")] = time.Now()
		burst.Heartbeats++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("POST /burst/request_task", func(w http.ResponseWriter, r *http.Request) {
		select {
		case gate <- struct{}{}:
		default:
			mu.Lock()
			burst.Rejected++
			mu.Unlock()
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			w.Write([]byte("busy\n"))
			return
		}
		defer func() { <-gate }()
		if err := sleepCtx(r.Context(), TaskCall); err != nil {
			return
		}
		mu.Lock()
		burst.Tasks++
		n := burst.Tasks
		mu.Unlock()
		writeJSON(w, TaskReply{Task: n})
	})
	mux.HandleFunc("GET /burst/stats", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := burst
		s.Workers = len(seen)
		mu.Unlock()
		writeJSON(w, s)
	})

	stopRooms := registerRoomsNetHTTP(mux)
	stopWS := registerWSNetHTTP(mux)
	stopArena := registerArenaNetHTTP(mux)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		stopRooms()
		stopWS()
		stopArena()
		return nil, err
	}
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	return &Running{addr: ln.Addr().String(), close: func() error {
		err := hs.Close()
		<-errc
		stopRooms()
		stopWS()
		stopArena()
		return err
	}}, nil
}

// dbPool is a bounded set of connections like database/sql's MaxOpenConns: a call waits
// (without bound, until its context ends) for a free one.
type dbPool chan struct{}

func (p dbPool) call(ctx context.Context, d time.Duration) error {
	select {
	case p <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p }()
	return sleepCtx(ctx, d)
}

// writeJSON answers 200 with v as JSON followed by a newline, as baton's Ctx.JSON does.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("servers: JSON response: %v", err)
	}
}
