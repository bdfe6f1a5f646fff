// Command utilization re-creates the asyncio utilisation demo that seeded baton's design:
// every endpoint answers JSON with its own task's scheduling figures (rounds, on-loop time,
// queue delay, parked time), so the cost of each way of waiting can be seen.
//
//	go run ./examples/utilization -addr 127.0.0.1:8080
//	curl '127.0.0.1:8080/block?amount=1&nice=true'   # ~100 rounds, ~1 s on the loop
//	curl '127.0.0.1:8080/block?amount=1&nice=false'  # 1 round, ~1 s, a stall is logged
//	curl '127.0.0.1:8080/sleep?amount=1'             # 2 rounds, ~0 on the loop
//	curl '127.0.0.1:8080/offload?amount=1'           # 2 rounds, ~0 on the loop, parked 1 s
//	curl '127.0.0.1:8080/io?amount=1'                # blocks the loop thread (the bad pattern)
//	curl '127.0.0.1:8080/debug/baton/tasks?format=text'
//
// It reads the BATON_* environment (see loop.FromEnv).
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

	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/accounting"
	"github.com/batonrt/baton/loop"
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
	srv.Handle("GET /io", blockingIO)
	srv.HandleStats("/debug/baton")
	return srv
}

// amount reads ?amount=S (seconds, a float).
func amount(c *loop.Ctx) (time.Duration, bool) {
	s, err := strconv.ParseFloat(c.Query("amount"), 64)
	d := time.Duration(s * float64(time.Second))
	if err != nil || d < 0 || d > maxAmount {
		c.String(400, fmt.Sprintf("amount must be seconds between 0 and %v\n", maxAmount.Seconds()))
		return 0, false
	}
	return d, true
}

// answer replies with the task's own figures.
func answer(c *loop.Ctx) {
	s := c.Stats()
	c.JSON(200, accounting.TaskJSON(&s))
}

// block burns amount of CPU on the loop: in 10 ms steps with a Yield between them when
// nice, in one piece when not (which stalls every other request meanwhile).
func block(c *loop.Ctx) {
	d, ok := amount(c)
	if !ok {
		return
	}
	if c.Query("nice") == "true" {
		steps := int((d + step/2) / step)
		for i := 0; i < steps; i++ {
			if i > 0 {
				c.Yield()
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

// blockingIO blocks the loop thread itself in a blocking wait on a pipe for amount: the
// bad pattern, kept so the stall detector and the CPU-vs-wall split can be seen.
func blockingIO(c *loop.Ctx) {
	d, ok := amount(c)
	if !ok {
		return
	}
	var fds [2]int
	if err := unix.Pipe(fds[:]); err != nil {
		c.String(500, err.Error()+"\n")
		return
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	pfd := []unix.PollFd{{Fd: int32(fds[0]), Events: unix.POLLIN}}
	deadline := time.Now().Add(d)
	for left := time.Until(deadline); left > 0; left = time.Until(deadline) {
		_, _ = unix.Poll(pfd, int(left.Milliseconds())+1) // nothing is ever written: waits
	}
	answer(c)
}
