// Package offload runs blocking work in a bounded pool of reused goroutines while the calling
// handler is parked, and hands the result back to the handler.
//
// Handlers run as cooperative tasks on one loop goroutine (or, in multi-thread mode, in
// ordinary goroutines). Anything that blocks — a database driver, file I/O, an HTTP client,
// CPU-heavy work — must not run on the loop. [Do] sends it to a [Pool] and parks the handler
// through its [Caller] until the function returns:
//
//	user, err := offload.Do(c, func(ctx context.Context) (User, error) {
//		return db.LoadUser(ctx, id)
//	})
//
// The package never imports the loop: a handler context implements [Caller], whose one
// hook, [Caller.OffloadHook], lends the pool a [Hook]: the pool, the route key, and a
// Suspend function that parks the handler its own way (a coroutine park woken through the
// loop's door, or a blocked goroutine) and returns a resume function that the pool calls
// from a worker.
//
// # Tokens, lanes and the predictor
//
// A pool has a fixed number of tokens ([Config.Tokens]); a running function holds one. A
// call that finds no free token waits in a bounded FIFO queue, parked (never blocking the
// loop). The tokens are split between a fast lane and a slow lane ([Config.SlowTokens]):
// a predictor keeps, per route key ([Hook.Key], e.g. "GET /users/{id}"), an EWMA
// of the run time that decays over time, and sends routes whose estimate is above
// [Config.PromoteAfter] to the slow lane until it falls below [Config.DemoteBelow]. A call
// still running past PromoteAfter marks its route slow at once (mid-flight learning), so a
// flood of a new slow route is moved out of the fast lane after one threshold, not after
// its first calls finish. The slow lane never borrows fast tokens, and a call of a slow
// route waits for a slow token even when fast tokens are free, so a flood of slow calls
// cannot delay fast ones.
//
// Within a lane, the running calls of one route may hold at most [Config.MaxKeyShare] of
// its tokens (default half); further calls of that route wait in the route's own queue,
// which never delays other routes' calls. So a route whose functions hang, ignoring their
// context, starves only itself. See docs/offload.md for sizing (Little's law) and the
// defaults.
//
// # Gates
//
// A [Gate] is a named semaphore for a hot endpoint, independent of pool tokens:
// [Gate.TryEnter] fails at once when the gate is full so the handler can answer 429/503
// with Retry-After instead of pinning pool tokens behind a lock; [Gate.Enter] waits FIFO
// in a bounded queue.
//
// # Streaming
//
// [Copy] and [CopySeq] drain a blocking source (a file, a database cursor) chunk by chunk
// in the pool and write every chunk on the caller's task, so the writer's backpressure
// parks the handler and the body is never buffered whole. No token is held while a chunk
// is being written.
//
// # Deadlocks
//
// An offloaded function must not wait for the pool it runs in: if every token is held by
// functions that wait for a token, nothing ever returns. [Do], [Gate.Enter], [Copy] and
// [CopySeq] return [ErrNested] at once when called with a Caller whose Context comes from
// an offloaded function (it carries a marker) or with a Caller that is
// already waiting in the pool (an offloaded function that captured its handler's Caller).
// An offloaded function must also never wait for the loop (a loop Future, a channel the
// loop fills): post to the loop instead. docs/deadlocks.md explains both.
//
// # Goroutines
//
// Every exported function and method says who may call it. "Any goroutine" means safe for
// concurrent use. "The caller's task" means the task or goroutine that owns the Caller and
// may park (a handler, on the loop in single-thread mode): Do, Enter, Copy and CopySeq park
// it. Nothing in this package ever blocks the loop: the pool and gate mutexes are held for
// short, bounded sections (admission and completion do a constant amount of work, Stats
// copies at most 2 x 256 routes; docs/offload.md has the measured figures), and
// nobody waits for a worker while holding one.
package offload
