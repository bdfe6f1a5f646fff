// Command hello is the smallest baton server: GET / answers the 13-byte plain-text
// "Hello, World!" (for comparison with other servers) and GET /json a small JSON document
// built from state shared by every handler without locks.
//
//	go run ./examples/hello -addr 127.0.0.1:8080
//
// It reads the BATON_* environment (see loop.FromEnv), e.g. BATON_REQUEST_CONCURRENCY, and
// drains gracefully on SIGINT or SIGTERM. It refuses multi-thread mode: its handlers share
// state without locks.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/batonrt/baton/loop"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address (host:port)")
	lock := flag.Bool("lock-os-thread", false, "lock the event loop to its OS thread")
	flag.Parse()

	cfg, err := loop.FromEnv(loop.Config{Addr: *addr, LockOSThread: *lock})
	if err != nil {
		slog.Error("hello: configuration", "err", err)
		os.Exit(2)
	}
	if cfg.MultiThread {
		// The handlers below share state without locks, which is only safe when one runs
		// at a time: the point of this example.
		slog.Error("hello: needs single-thread mode (unset BATON_USE_SINGLE_THREAD=false)")
		os.Exit(2)
	}
	srv := loop.New(cfg)
	hits := 0 // shared by every handler: one runs at a time, so no mutex
	srv.Handle("GET /", func(c *loop.Ctx) {
		c.String(200, "Hello, World!")
	})
	srv.Handle("GET /json", func(c *loop.Ctx) {
		hits++
		c.JSON(200, map[string]any{"message": "Hello, World!", "hits": hits})
	})

	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			slog.Error("shutdown", "err", err)
		}
	}()
	go func() {
		<-srv.Ready()
		if a := srv.Addr(); a != nil {
			slog.Info("hello: serving", "addr", "http://"+a.String()+"/")
		}
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, loop.ErrServerClosed) {
		slog.Error("hello", "err", err)
		os.Exit(1)
	}
	slog.Info("hello: stopped", "drained", fmt.Sprintf("%+v", srv.DrainReport()))
}
