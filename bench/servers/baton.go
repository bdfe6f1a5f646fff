package servers

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/stats"
	"github.com/batonrt/baton/offload"
)

// poolCaller is a handler's Ctx whose offloaded calls go to pool instead of the server's
// own pool (the slow-flood routes compare two pools in one server).
type poolCaller struct {
	*loop.Ctx
	pool *offload.Pool
}

// OffloadHook is the Ctx's hook with the pool the calls go to.
func (p poolCaller) OffloadHook() offload.Hook {
	h := p.Ctx.OffloadHook()
	h.Pool = p.pool
	return h
}

// busy answers 503 (or 429) with Retry-After.
func busy(c *loop.Ctx, status int) {
	c.SetHeader("Retry-After", "1")
	c.String(status, "busy\n")
}

// startBaton serves the routes on baton: every handler is a task on the loop, so the game
// state and the hog totals are plain values shared without locks. noAccounting turns
// accounting off.
func startBaton(addr string, logger *slog.Logger, noAccounting bool, shards int) (*Running, error) {
	srv := loop.New(loop.Config{Addr: addr, IdleTimeout: IdleTimeout, Logger: logger, NoAccounting: noAccounting, Shards: shards,
		RuntimeTimers: os.Getenv(EnvRuntimeTimers) == "1"})
	if shards > 1 {
		return startBatonShards(srv, noAccounting) // shards_baton.go: plaintext and rooms only
	}
	g := newGame()
	var hogs HogStats

	srv.Handle("GET /plaintext", func(c *loop.Ctx) {
		c.String(200, Hello)
	})
	srv.Handle("GET /json/players/{id}", func(c *loop.Ctx) {
		r, ok := g.get(c.PathValue("id"))
		if !ok {
			c.String(404, "unknown player\n")
			return
		}
		c.JSON(200, r)
	})
	srv.Handle("POST /json/players/{id}/move", func(c *loop.Ctx) {
		c.JSON(200, g.move(c.PathValue("id")))
	})
	hog := func(c *loop.Ctx, yieldEvery time.Duration) {
		start := time.Now()
		if yieldEvery <= 0 {
			burn(HogBurn)
		} else {
			for done := time.Duration(0); done < HogBurn; done += yieldEvery {
				burn(min(yieldEvery, HogBurn-done))
				_ = c.Sleep(0) // yield
			}
		}
		st := c.Stats()
		r := HogReply{
			BurnUs: HogBurn.Microseconds(), YieldEveryUs: yieldEvery.Microseconds(),
			WallUs: time.Since(start).Microseconds(), Rounds: st.Rounds,
			OnLoopUs: st.OnLoop.Microseconds(), MaxSliceUs: st.MaxSlice.Microseconds(),
			QueueDelayUs: st.QueueDelay.Microseconds(),
		}
		hogs.add(r)
		c.JSON(200, r)
	}
	srv.Handle("GET /hog/spin", func(c *loop.Ctx) { hog(c, 0) })
	srv.Handle("GET /hog/yield", func(c *loop.Ctx) { hog(c, HogSlice) })
	srv.Handle("GET /hog/stats", func(c *loop.Ctx) { c.JSON(200, hogs) })

	// slow-flood: two pools of the same size, with and without lanes.
	// MaxKeyShare 1: no per-route cap, so the flood compares lanes against no lanes alone.
	lanes := offload.New(offload.Config{Tokens: FloodTokens, MaxWaiting: FloodMaxWaiting, MaxKeyShare: 1})
	noLanes := offload.New(offload.Config{Tokens: FloodTokens, MaxWaiting: FloodMaxWaiting, NoLanes: true, MaxKeyShare: 1})
	flood := func(pool *offload.Pool, d time.Duration, body string) loop.HandlerFunc {
		return func(c *loop.Ctx) {
			_, err := offload.Do(poolCaller{c, pool}, func(ctx context.Context) (struct{}, error) {
				return struct{}{}, sleepCtx(ctx, d)
			})
			switch {
			case err == nil:
				c.String(200, body)
			case errors.Is(err, offload.ErrQueueFull):
				busy(c, 503)
			case c.Err() == nil:
				c.String(500, err.Error()+"\n")
			}
		}
	}
	srv.Handle("GET /flood/lanes/fast", flood(lanes, FastCall, "fast"))
	srv.Handle("GET /flood/lanes/slow", flood(lanes, SlowCall, "slow"))
	srv.Handle("GET /flood/nolanes/fast", flood(noLanes, FastCall, "fast"))
	srv.Handle("GET /flood/nolanes/slow", flood(noLanes, SlowCall, "slow"))

	// reconnect-burst: heartbeats into a plain map, request_task behind a gate.
	seen := map[string]time.Time{}
	var burst BurstStats
	gate := srv.NewGate("request_task", TaskGate, 0)
	srv.Handle("POST /burst/heartbeat/{worker}", func(c *loop.Ctx) {
		seen[c.PathValue("worker")] = time.Now()
		burst.Heartbeats++
		c.String(200, "ok")
	})
	srv.Handle("POST /burst/request_task", func(c *loop.Ctx) {
		if !gate.TryEnter() {
			burst.Rejected++
			busy(c, 429)
			return
		}
		defer gate.Leave()
		if _, err := offload.Do(c, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, sleepCtx(ctx, TaskCall)
		}); err != nil {
			if c.Err() == nil {
				c.String(500, err.Error()+"\n")
			}
			return
		}
		burst.Tasks++
		c.JSON(200, TaskReply{Task: burst.Tasks})
	})
	srv.Handle("GET /burst/stats", func(c *loop.Ctx) {
		s := burst
		s.Workers = len(seen)
		c.JSON(200, s)
	})

	registerRoomsBaton(srv)
	registerWSBaton(srv)
	registerArenaBaton(srv)
	if !noAccounting {
		stats.Mount(srv, "/debug/baton") // the rooms scenario reads /debug/baton/rooms and /loop
	}

	closePools := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = lanes.Close(ctx)
		_ = noLanes.Close(ctx)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case <-srv.Ready():
	case err := <-errc:
		closePools()
		return nil, err
	}
	return &Running{addr: srv.Addr().String(), close: func() error {
		err := srv.Close()
		<-errc
		closePools()
		return err
	}}, nil
}

// EnvRuntimeTimers, set to 1 in the environment of the bench server, turns on
// loop.Config.RuntimeTimers in its baton targets (to compare the runtime timer with the
// default timerfd alarm: docs/rooms.md, "The alarm").
const EnvRuntimeTimers = "BATON_RUNTIME_TIMERS"
