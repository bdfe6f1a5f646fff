// Package loop serves HTTP/1.1 from one gnet event loop, running every handler as a
// cooperative task on that loop so that handlers share state without locks.
//
// # Model
//
// A Server owns one event-loop goroutine (the loop). It accepts connections, parses requests
// with package httpcodec and runs each request's handler as a task of package scheduler: plain
// sequential Go that may park (Ctx.Sleep, Future.Await, Ctx.Yield, offloaded work) while other
// tasks run. Only one task runs at any instant, so handlers, background tasks started with
// Loop.Go and Loop.Every, and functions posted with Loop.Post may read and write shared
// state with no mutex, and the race detector agrees.
//
// Handlers must never block the loop thread: no channel receives, no time.Sleep, no blocking
// syscalls. Park through the Ctx instead, or hand blocking work to another goroutine and
// resume through a Future resolved via Loop.Post.
//
// # Goroutines
//
// Every method says where it may be called:
//   - "loop-confined": only from a handler, a background task, or a function posted with
//     Loop.Post (all of which run on the loop goroutine).
//   - "safe for concurrent use": from any goroutine.
//
// Loop.Post is the one door through which other goroutines get code run on the loop.
//
// # Connections
//
// Connections are never refused at accept time. Each connection handles its requests in
// order: a pipelined request is parsed only when the previous response is complete, so
// responses always leave in request order. Responses produced while handling one read (or one
// loop turn) are gathered into a single write. A connection closed by the client cancels the
// context of its in-flight task, and that task's later writes go nowhere: the server tracks
// closed connections itself, so a late write can never reach a client that reused the file
// descriptor.
//
// A handler panic (or runtime.Goexit) is recovered: it is counted, logged with its stack
// (rate-limited), answered with 500 if nothing was written yet, and the loop keeps running.
// A handler that returns without writing gets an empty 200.
//
// # Background tasks, middleware, shutdown
//
// Loop.Go and Loop.Every start named background tasks on the loop and return a
// TaskHandle that stops them. Server.Use and Server.Group wrap handlers in middleware, which
// hands request-scoped values on with Ctx.SetValue. Futures are safe for concurrent
// use; Future.Await and Cond.Wait take a bound (a long poll). Shutdown drains: the
// Server.Draining future is resolved and OnDrain hooks run, work in flight finishes, and
// DrainReport says what was drained. Future (also a one-shot signal, as Future[struct{}]) and Cond (a reusable broadcast signal)
// let tasks wait for each other; Loop.HoldDrain keeps a drain open until work started
// on the loop is saved. Package looptest starts a server in a test.
//
// # Games: rooms, WebSocket, health
//
// Package loop/room starts rooms: groups of tasks with loop-owned state, ticked against
// absolute deadlines with a budget and a late-tick policy, fed by a bounded input queue,
// accounted on their own (the rooms page) and drained with the server (docs/rooms.md).
// Package loop/ws turns a request into a WebSocket connection (ws.Upgrade, whose handler
// task reads and writes it, or ws.UpgradeTo, callbacks holding no task while idle) and
// sends one encoded frame to many (docs/websocket.md). It is built on Ctx.Takeover, which
// hands a request's connection to a protocol of raw bytes (RawHandler, RawConn), as
// net/http's Hijacker does.
// Package loop/health answers /healthz and /readyz from the loop's own view
// (Loop.Vitals); package loop/ratelimit is a keyed token-bucket rate limiter (docs/health.md).
//
// # Shards: more than one core
//
// Config.Shards = N runs N independent loops in one process, each a whole server of its
// own (scheduler, connections, admission, accounting, rooms) on its own goroutine, all
// listening on Config.Addr with SO_REUSEPORT so the kernel spreads connections over them.
// Handle and the other registration methods apply to every shard; ListenAndServe,
// Shutdown, the health checks and the stats pages cover them all. A handler's
// state stays lock-free when it is per loop (Ctx.Loop says which loop runs it: give it to
// room.New, NewFuture and NewCond, and call its Go, Every, OnDrain and
// HoldDrain); loops talk through Server.Loop(i).Post, and Server.LoopFor maps a key (a
// room id) to a loop. The Server is the process: what it does covers every loop.
// The offload pool is shared (docs/design.md, "Shards").
//
// # Ecosystem
//
// Package loop/nethttp mounts net/http handlers (run off the loop); Config.OnRequestDone and
// package loop/accesslog give an access log; package loop/stats serves the stats pages and a
// live dashboard (stats.Mount, stats.Handler) and returns their figures as Go values
// (stats.Take), which the promexport module exports to Prometheus; every page is a section
// of the stats registry (Server.AddStats, Server.StatsSections) (docs/ecosystem.md,
// docs/observability.md).
//
// The examples run as tests: Example (a lock-free handler), Example_offload,
// ExampleLoop_Every (a stoppable tick) and ExampleServer_Shutdown (a drain); each feature
// package has its own (loop/ws: WebSocket in both forms; loop/nethttp: net/http handlers).
package loop
