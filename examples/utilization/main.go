// Command utilization re-creates the asyncio utilisation demo that seeded baton's design:
// every endpoint answers JSON with its own task's scheduling figures (rounds, on-loop time,
// queue delay, parked time), so the cost of each way of waiting can be seen.
//
//	go run ./examples/utilization -addr 127.0.0.1:8080
//	curl '127.0.0.1:8080/block?amount=1&nice=true'   # ~100 rounds, ~1 s on the loop
//	curl '127.0.0.1:8080/block?amount=1&nice=false'  # 1 round, ~1 s, a stall is logged
//	curl '127.0.0.1:8080/sleep?amount=1'             # 2 rounds, ~0 on the loop
//	curl '127.0.0.1:8080/offload?amount=1'           # 2 rounds, ~0 on the loop, parked 1 s
//	curl '127.0.0.1:8080/io?amount=1'                # 2 rounds, ~0 on the loop, parked 1 s waiting on a pipe
//	curl '127.0.0.1:8080/debug/baton/tasks?format=text'
//
// amount is in seconds (default 0, at most 30); nice defaults to true, as in the asyncio
// demo. The status field of an answer is the answer's own status (200). It reads the
// BATON_* environment (see loop.FromEnv).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/stats"
	"github.com/batonrt/baton/offload"
)

// step is the unit of CPU burnt between yields by /block?nice=true.
const step = 10 * time.Millisecond

// maxAmount bounds ?amount so that one request cannot hold the demo for long.
const maxAmount = 30 * time.Second

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address (host:port)")
	flag.Parse()
	cfg, err := loop.FromEnv(loop.Config{Addr: *addr})
	if err != nil {
		slog.Error("utilization: configuration", "err", err)
		os.Exit(2)
	}
	srv := newServer(cfg)
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	go func() {
		<-srv.Ready()
		if a := srv.Addr(); a != nil {
			slog.Info("utilization: serving", "addr", "http://"+a.String()+"/")
		}
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, loop.ErrServerClosed) {
		slog.Error("utilization", "err", err)
		os.Exit(1)
	}
}

// newServer builds the demo server on cfg.
func newServer(cfg loop.Config) *loop.Server {
	srv := loop.New(cfg)
	srv.Handle("GET /block", block)
	srv.Handle("GET /sleep", sleep)
	srv.Handle("GET /offload", offloaded)
	srv.Handle("GET /io", waitIO)
	stats.Mount(srv, "/debug/baton")
	return srv
}

// amount reads ?amount=S (seconds, a float; default 0).
func amount(c *loop.Ctx) (time.Duration, bool) {
	q := c.Query("amount")
	if q == "" {
		return 0, true
	}
	s, err := strconv.ParseFloat(q, 64)
	d := time.Duration(s * float64(time.Second))
	if err != nil || d < 0 || d > maxAmount {
		c.String(400, fmt.Sprintf("amount must be seconds between 0 and %v\n", maxAmount.Seconds()))
		return 0, false
	}
	return d, true
}

// answer replies with the task's own figures; their status is this answer's.
func answer(c *loop.Ctx) {
	s := c.Stats()
	s.Status = 200 // the figures are taken before the response is written
	c.JSON(200, s) // TaskSample encodes itself as docs/accounting.md's task

}

// block burns amount of CPU on the loop: in 10 ms steps with a Yield between them when
// nice (the default), in one piece when not (which stalls every other request meanwhile).
func block(c *loop.Ctx) {
	d, ok := amount(c)
	if !ok {
		return
	}
	nice := true
	if q := c.Query("nice"); q != "" {
		var err error
		if nice, err = strconv.ParseBool(q); err != nil {
			c.String(400, "nice must be true or false\n")
			return
		}
	}
	if nice {
		steps := int((d + step/2) / step)
		for i := 0; i < steps; i++ {
			if i > 0 && c.Sleep(0) != nil { // a yield: the loop runs the others
				return // the client went away
			}
			burn(step)
		}
	} else {
		burn(d)
	}
	answer(c)
}

// burn spins the CPU for d.
func burn(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// sleep parks the task for amount: the loop serves others meanwhile.
func sleep(c *loop.Ctx) {
	d, ok := amount(c)
	if !ok {
		return
	}
	_ = c.Sleep(d)
	answer(c)
}

// offloaded runs amount of blocking work in the offload pool while the task is parked.
func offloaded(c *loop.Ctx) {
	d, ok := amount(c)
	if !ok {
		return
	}
	_, err := offload.Do(c, func(ctx context.Context) (struct{}, error) {
		select { // blocking work: fine here, off the loop
		case <-time.After(d):
		case <-ctx.Done():
		}
		return struct{}{}, ctx.Err()
	})
	if err != nil {
		c.String(503, err.Error()+"\n")
		return
	}
	answer(c)
}

// waitIO waits for a pipe to become readable, as the asyncio demo's /io waits on a file
// descriptor: another goroutine (the demo's other thread) writes to the pipe after amount,
// a reader goroutine blocked on the read end (in Go's poller, holding no thread) resolves a
// Future, and the task awaits it parked, so the loop serves other requests meanwhile.
func waitIO(c *loop.Ctx) {
	d, ok := amount(c)
	if !ok {
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		c.String(500, err.Error()+"\n")
		return
	}
	readable := loop.NewFuture[int](c.Loop())
	stop := make(chan struct{})
	go func() { // the other thread: completes the descriptor after d
		defer w.Close() // also ends the reader when the request is gone first
		select {
		case <-time.After(d):
			_, _ = w.Write([]byte{1})
		case <-stop:
		}
	}()
	go func() { // the wait: a read that parks in the poller, not on the loop
		defer r.Close()
		var b [1]byte
		n, err := r.Read(b[:])
		readable.Resolve(n, err)
	}()
	_, err = readable.Await(c, 0) // parked (reason "wait"): the loop runs other tasks
	close(stop)                   // the writer closes its end, so the reader returns: nothing outlives the request for long
	if err != nil {
		c.String(503, err.Error()+"\n")
		return
	}
	answer(c)
}
