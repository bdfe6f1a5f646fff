package loop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// maxShards is the largest Config.Shards: far more loops than cores is a mistake (every
// loop is one core's worth of work), and each shard holds a listening socket, a scheduler
// and its own accounting.
const maxShards = 256

// shardFailDrain bounds the drain of the other shards when one shard's loop stops by
// itself (an error ListenAndServe returns so that a supervisor restarts the process): long
// enough for ordinary requests to finish, short enough for a prompt restart.
const shardFailDrain = 10 * time.Second

// Why shards are whole single-loop Servers.
//
// A Server with Config.Shards = N is N complete single-loop Servers (each with its gnet
// engine, door, scheduler, connections, admission, accounting, rooms and WebSocket table),
// built from the same Config by New. The one New returns is shard 0 and also the face of
// the whole: ListenAndServe, Shutdown, Ready, Done, Addr, DrainReport and the stats
// registry (StatsSections, summed by package loop/stats) cover every shard, and Handle, Use, Group and a feature's Mount
// register on every shard. Every other method (Post, Go,
// Every, OnDrain, HoldDrain, Draining, NewGate, NewFuture and the other constructors that
// take a Server) is about that Server's own shard. Nothing of a shard's loop-owned state is
// reachable from another shard, so handlers and rooms of a shard need no locks; shards talk
// through Loop.Post.
//
// Each shard listens with its own SO_REUSEPORT socket on the same address and accepts on
// its own goroutine; the kernel spreads new connections over the sockets by a hash of the
// connection's addresses. The alternative, one acceptor handing connections to the N
// engines (least connections), would balance long-lived connections better but puts every
// accept on one goroutine and one more cross-thread hand-off on every connection, and the
// acceptor's drain bookkeeping (accept_guard.go) is per engine. docs/design.md, "Shards",
// says what this costs (a held shard keeps receiving its share of new connections).
//
// The offload pool is shared: one bounded pool for the process's blocking work, so
// Config.Offload's tokens bound the process (the database or disk behind them does not
// grow with the shards). The logger is shared too; the rest is per shard.

// shardSet is what the shards of one Server share. all is immutable after New; the rest is
// guarded by mu or safe for concurrent use.
type shardSet struct {
	all   []*Server     // all[0] is the Server New returned
	ready chan struct{} // closed once every shard's ready is
	done  chan struct{} // closed when ListenAndServe returned, or at a Shutdown before start

	mu      sync.Mutex
	started bool // ListenAndServe was called
	stopped bool // Shutdown or Close was called
}

// newShards builds the shards for cfg (defaults applied, cfg.Shards > 1): shard 0 is the
// returned Server. Every shard gets cfg with one shared offload pool; shards 1.. leave the
// file limit to shard 0.
func newShards(cfg Config) *Server {
	set := &shardSet{all: make([]*Server, cfg.Shards), ready: make(chan struct{}), done: make(chan struct{})}
	root := newServer(cfg, nil)
	set.all[0] = root
	sub := cfg
	sub.KeepFileLimit = true
	for i := 1; i < cfg.Shards; i++ {
		set.all[i] = newServer(sub, root.pool)
		set.all[i].shardIdx = i
		set.all[i].statsReg = root.statsReg // one registry: a section is every loop's
	}
	for _, sh := range set.all {
		sh.shards = set
	}
	return root
}

// listen opens every shard's listening socket. Shard 0 listens on Config.Addr; the others
// on the port it got (the kernel's choice for port 0). Call it before the shards serve.
func (set *shardSet) listen() error {
	root := set.all[0]
	addr := root.cfg.Addr
	for i, sh := range set.all {
		if err := sh.guard.listen(addr, sh.log); err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
		if i == 0 {
			host, _, err := net.SplitHostPort(addr)
			if err != nil { // Validate checked it
				return err
			}
			addr = net.JoinHostPort(host, strconv.Itoa(sh.guard.addr().Port))
		}
	}
	return nil
}

// listenAndServe is ListenAndServe with shards.
func (set *shardSet) listenAndServe() error {
	root := set.all[0]
	set.mu.Lock()
	switch {
	case set.started:
		set.mu.Unlock()
		select {
		case <-set.done:
			return ErrServerClosed // as one loop's: a second call after the stop
		default:
			return errServerStarted
		}
	case set.stopped:
		set.mu.Unlock()
		<-set.done
		return ErrServerClosed
	}
	set.started = true
	set.mu.Unlock()
	defer close(set.done)
	go set.waitReady()
	if err := set.listen(); err != nil {
		for _, sh := range set.all {
			sh.guard.finish()
			_ = sh.shutdownOne(context.Background()) // never started: nothing to drain
		}
		root.closePoolAfterStop()
		return fmt.Errorf("loop: serve %s: %w", root.cfg.Addr, err)
	}
	errs := make([]error, len(set.all))
	failed := make(chan struct{}, len(set.all))
	var wg sync.WaitGroup
	for i, sh := range set.all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = sh.serveLoop()
			if !errors.Is(errs[i], ErrServerClosed) {
				failed <- struct{}{}
			}
		}()
	}
	all := make(chan struct{})
	go func() {
		wg.Wait()
		close(all)
	}()
	select {
	case <-all:
	case <-failed: // a shard stopped by itself or could not start: the others drain
		ctx, cancel := context.WithTimeout(context.Background(), shardFailDrain)
		set.shutdownAll(ctx)
		cancel()
		<-all
	}
	for _, sh := range set.all {
		sh.guard.finish() // a shard stopped before it served still holds its socket
	}
	root.closePoolAfterStop()
	for i, err := range errs {
		if !errors.Is(err, ErrServerClosed) {
			return fmt.Errorf("loop: shard %d: %w", i, err)
		}
	}
	return ErrServerClosed
}

// waitReady closes set.ready once every shard is ready or has stopped without getting
// there. Every path that ends a shard closes its ready, so it returns.
func (set *shardSet) waitReady() {
	for _, sh := range set.all {
		<-sh.ready
	}
	close(set.ready)
}

// shutdown is Shutdown with shards: every shard drains at once under ctx.
func (set *shardSet) shutdown(ctx context.Context) error {
	root := set.all[0]
	root.setShutdownContext(ctx) // bounds the shared pool's close
	set.mu.Lock()
	if !set.started {
		first := !set.stopped
		set.stopped = true
		set.mu.Unlock()
		if first {
			for _, sh := range set.all {
				_ = sh.shutdownOne(ctx)
			}
			root.closePool(ctx)
			close(set.ready)
			close(set.done)
		}
		<-set.done
		return nil
	}
	set.stopped = true
	set.mu.Unlock()
	err := set.shutdownAll(ctx)
	<-set.done
	return err
}

// shutdownAll shuts every shard down concurrently and returns the first error.
func (set *shardSet) shutdownAll(ctx context.Context) error {
	errs := make([]error, len(set.all))
	var wg sync.WaitGroup
	for i, sh := range set.all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = sh.shutdownOne(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// drainReport sums the shards' drain reports once ListenAndServe has returned.
func (set *shardSet) drainReport() DrainReport {
	<-set.done
	var r DrainReport
	for _, sh := range set.all {
		<-sh.done
		d := sh.drain.report
		r.InFlight += d.InFlight
		r.Queued += d.Queued
		r.ClosedIdle += d.ClosedIdle
		r.RejectedDuring += d.RejectedDuring
		r.ForcedTasks += d.ForcedTasks
		r.Refused += d.Refused
		r.DeadlineReached = r.DeadlineReached || d.DeadlineReached
		r.TakeoversClosed += d.TakeoversClosed
		r.TakeoversForced += d.TakeoversForced
	}
	return r
}
