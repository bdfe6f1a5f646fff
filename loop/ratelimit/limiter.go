// Package ratelimit is a keyed token-bucket rate limiter for baton's loop: a bucket per
// key (a player id, a client address), loop-confined so it needs no lock, with a bounded
// key table, and a middleware that answers 429 with Retry-After.
//
// A Limiter's table belongs to one loop: call AllowTask (or Allow) from handlers and
// background tasks of that loop (a room's tick for its inputs), or mount Middleware, which
// runs its check on the loop in both modes and keeps a table per loop on a server with
// several (docs/health.md).
package ratelimit

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/batonrt/baton/internal/invariants"
	"github.com/batonrt/baton/loop"
)

// Defaults of Config.
const (
	// DefaultMaxKeys bounds a Limiter's key table: 100,000 keys is one bucket per
	// player of a large server, at about 100 bytes each plus the key (10-15 MiB at worst),
	// while a flood of made-up keys (spoofed player ids, a botnet's addresses) can never
	// grow it further.
	DefaultMaxKeys = 100_000
)

// Config configures a Limiter: a token bucket per key that refills at Rate tokens
// a second up to Burst; each allowed event takes one token.
type Config struct {
	// Rate is the sustained rate each key is allowed, in tokens (events) per second.
	// Required: it must be positive.
	Rate float64

	// Burst is the bucket's size: how many events a key may send at once after being
	// quiet. Required: at least 1.
	Burst int

	// MaxKeys bounds the key table. When it is full, a new key evicts the least recently
	// used one (whose bucket, the least recently drawn on, is the likeliest to have
	// refilled). Zero means DefaultMaxKeys.
	MaxKeys int

	// Idle is how long a key may go unused before its entry is dropped (lazily, when new
	// keys arrive). Zero means the time a bucket takes to refill from empty (Burst/Rate):
	// an entry idle that long holds a full bucket, exactly what a new entry starts with,
	// so dropping it changes no answer. It must not be shorter than that, which would hand
	// a key that was just refused a fresh burst.
	Idle time.Duration
}

// Validate reports the first invalid field, naming it. Any goroutine.
func (c Config) Validate() error {
	switch {
	case !(c.Rate > 0) || math.IsInf(c.Rate, 1):
		return fmt.Errorf("ratelimit: Config.Rate (%v) must be a positive number of tokens per second", c.Rate)
	case c.Burst < 1:
		return fmt.Errorf("ratelimit: Config.Burst (%d) must be at least 1", c.Burst)
	case c.MaxKeys < 0:
		return fmt.Errorf("ratelimit: Config.MaxKeys (%d) must not be negative (0: default %d)", c.MaxKeys, DefaultMaxKeys)
	case c.MaxKeys > math.MaxInt32-1:
		return fmt.Errorf("ratelimit: Config.MaxKeys (%d) must be below %d", c.MaxKeys, math.MaxInt32)
	case c.Idle < 0:
		return fmt.Errorf("ratelimit: Config.Idle (%v) must not be negative (0: the refill time Burst/Rate)", c.Idle)
	case c.Idle > 0 && c.Idle < refillTime(c):
		return fmt.Errorf("ratelimit: Config.Idle (%v) must be 0 or at least Burst/Rate (%v): a shorter one would forget a key's partly empty bucket", c.Idle, refillTime(c))
	}
	return nil
}

// refillTime is how long an empty bucket takes to fill.
func refillTime(c Config) time.Duration {
	return time.Duration(math.Ceil(float64(c.Burst) / c.Rate * float64(time.Second)))
}

// Limiter is a token-bucket rate limiter keyed by an application-chosen key (a player id,
// a client address). Its bucket table is loop-confined, so it needs no lock: the first
// loop that uses it (AllowTask, or a request through Middleware) owns it, and AllowTask
// from a task of another loop panics instead of racing (Allow, which is not told the
// loop, is checked under the invariants build: go test -race). Middleware keeps one table
// per loop, so on a server with several loops its rate is per loop. The key table is
// bounded: see Config.MaxKeys and Idle. Allow on a key already in the table does not
// allocate.
type Limiter struct {
	cfg   Config // with defaults applied: the configuration of the other loops' tables
	table        // the owning loop's table (Allow, AllowTask, the owner's Middleware)

	// bound is set once, by the first loop-aware use, and not changed after: the loop that
	// owns table and the tables Middleware keeps for the server's other loops.
	bound atomic.Pointer[binding]
}

// binding is the loops a Limiter serves, fixed at its first loop-aware use.
type binding struct {
	owner *loop.Loop
	loops []*loop.Loop // the owner's server's loops, by index
	// tables[i] is loop i's table for Middleware: &Limiter.table for the owner, made
	// lazily by loop i for the others. Slot i is read and written by loop i only.
	tables []*table
}

// table is one loop's buckets: a key table with a recency list. Loop-confined.
type table struct {
	rate    float64 // tokens per nanosecond
	burst   float64
	maxKeys int
	idle    int64
	base    time.Time // the origin of the entries' times (monotonic)

	idx        map[string]int32
	ents       []limEntry
	head, tail int32 // most and least recently used; -1 when empty
	free       int32 // a free slot's index (a list through next), -1 when none

	stats Stats
}

// limEntry is one key's bucket, linked into the recency list by index.
type limEntry struct {
	key        string
	tokens     float64
	last       int64 // ns since base of the last refill
	prev, next int32
}

// Stats counts a Limiter's answers and its key table. Plain data.
type Stats struct {
	Keys    int    // keys in the table now
	Allowed uint64 // events allowed
	Refused uint64 // events refused
	Evicted uint64 // keys dropped because the table was full (least recently used first)
	Expired uint64 // keys dropped after Config.Idle unused
}

// New returns a Limiter for cfg. It panics if cfg.Validate fails (a programming error).
// Any goroutine; the Limiter then belongs to the loop that first uses it.
func New(cfg Config) *Limiter {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Idle == 0 {
		cfg.Idle = refillTime(cfg)
	}
	l := &Limiter{cfg: cfg}
	l.table.init(cfg)
	return l
}

func (t *table) init(cfg Config) {
	*t = table{
		rate: cfg.Rate / float64(time.Second), burst: float64(cfg.Burst), maxKeys: cfg.MaxKeys,
		idle: int64(cfg.Idle), base: time.Now(),
		idx:  make(map[string]int32, min(cfg.MaxKeys, 1024)),
		head: -1, tail: -1, free: -1,
	}
}

// bind returns the Limiter's binding, making lp's loop the owner when it has none yet.
// Any goroutine (the binding is immutable but for its per-loop slots).
func (l *Limiter) bind(lp *loop.Loop) *binding {
	if b := l.bound.Load(); b != nil {
		return b
	}
	loops := lp.Server().Loops()
	b := &binding{owner: lp, loops: loops, tables: make([]*table, len(loops))}
	b.tables[lp.Index()] = &l.table
	if !l.bound.CompareAndSwap(nil, b) {
		return l.bound.Load() // another loop bound it first
	}
	return b
}

// Allow takes a token from key's bucket at now (the loop clock: loop.Loop.Now) and reports
// whether there was one. When there was not, retryAfter is how long until there will be
// (exact; Middleware rounds it up to whole seconds for Retry-After). A key not in the
// table starts with a full bucket. Loop-confined: from the loop that owns the Limiter.
// Allow is not told the caller's loop, so only the invariants build (go test -race)
// checks it, once AllowTask or Middleware has bound the Limiter to a loop; AllowTask
// checks it always.
func (l *Limiter) Allow(key string, now time.Time) (ok bool, retryAfter time.Duration) {
	l.checkOwner("Allow")
	return l.table.allow(key, now)
}

// AllowTask is Allow for task t, at its loop's clock (Loop.Now); pass a handler's &c.Task. The
// first call (or request through Middleware) binds the Limiter to t's loop; a call from a
// task of another loop panics, naming both loops, where Allow would race. Loop-confined:
// call it from t on its loop (a multi-thread handler through Task.OnLoop).
func (l *Limiter) AllowTask(t *loop.Task, key string) (ok bool, retryAfter time.Duration) {
	lp := t.Loop()
	b := l.bind(lp)
	if b.owner != lp {
		panic(fmt.Sprintf("ratelimit: Limiter.AllowTask called from loop %d, but the limiter belongs to loop %d (the loop that first used it): a Limiter is loop-confined; make one per loop, or use Middleware, which keeps a table per loop", lp.Index(), b.owner.Index()))
	}
	if invariants.Enabled {
		invariants.Assert(lp.OnLoop(), "ratelimit: Limiter.AllowTask called off loop %d (a multi-thread handler must call it through Task.OnLoop)", lp.Index())
	}
	return l.table.allow(key, lp.Now())
}

func (l *table) allow(key string, now time.Time) (ok bool, retryAfter time.Duration) {
	t := int64(now.Sub(l.base))
	i, found := l.idx[key]
	if found {
		l.touch(i)
	} else {
		i = l.insert(key, t)
	}
	e := &l.ents[i]
	if t > e.last {
		e.tokens = min(e.tokens+float64(t-e.last)*l.rate, l.burst)
		e.last = t
	}
	if e.tokens >= 1 {
		e.tokens--
		l.stats.Allowed++
		return true, 0
	}
	l.stats.Refused++
	return false, time.Duration(math.Ceil((1 - e.tokens) / l.rate))
}

// Loop returns the loop that owns the Limiter (its first AllowTask or Middleware request
// ran there), or nil before that. Any goroutine.
func (l *Limiter) Loop() *loop.Loop {
	if b := l.bound.Load(); b != nil {
		return b.owner
	}
	return nil
}

// Stats returns the counts of the owning loop's table (Allow, AllowTask, and Middleware's
// requests on that loop). Loop-confined: from the owning loop.
func (l *Limiter) Stats() Stats {
	l.checkOwner("Stats")
	st := l.stats
	st.Keys = len(l.idx)
	return st
}

// Len returns the number of keys in the owning loop's table. Loop-confined.
func (l *Limiter) Len() int {
	l.checkOwner("Len")
	return len(l.idx)
}

// checkOwner panics, in the invariants build, when a bound Limiter's table is reached off
// its loop.
func (l *Limiter) checkOwner(method string) {
	if invariants.Enabled {
		if b := l.bound.Load(); b != nil {
			invariants.Assert(b.owner.OnLoop(), "ratelimit: Limiter.%s called off loop %d, the loop that owns the limiter: a Limiter is loop-confined (make one per loop, or use Middleware, which keeps a table per loop)", method, b.owner.Index())
		}
	}
}

// insert adds key with a full bucket, making room first: entries idle past Idle go (a few
// per insert, oldest first, so the work per call stays bounded), then the least recently
// used one if the table is still full.
func (l *table) insert(key string, t int64) int32 {
	for range 2 {
		if l.tail < 0 || t-l.ents[l.tail].last < l.idle {
			break
		}
		l.remove(l.tail)
		l.stats.Expired++
	}
	if len(l.idx) >= l.maxKeys {
		l.remove(l.tail)
		l.stats.Evicted++
	}
	var i int32
	if l.free >= 0 {
		i = l.free
		l.free = l.ents[i].next
	} else {
		i = int32(len(l.ents))
		l.ents = append(l.ents, limEntry{})
	}
	l.ents[i] = limEntry{key: key, tokens: l.burst, last: t, prev: -1, next: l.head}
	if l.head >= 0 {
		l.ents[l.head].prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
	l.idx[key] = i
	return i
}

// touch moves entry i to the front of the recency list.
func (l *table) touch(i int32) {
	if l.head == i {
		return
	}
	e := &l.ents[i]
	l.ents[e.prev].next = e.next // i is not the head: it has a prev
	if e.next >= 0 {
		l.ents[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = -1, l.head
	l.ents[l.head].prev = i
	l.head = i
}

// remove unlinks entry i, drops its key and puts its slot on the free list.
func (l *table) remove(i int32) {
	e := &l.ents[i]
	if e.prev >= 0 {
		l.ents[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next >= 0 {
		l.ents[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	delete(l.idx, e.key)
	*e = limEntry{next: l.free, prev: -1}
	l.free = i
}

// RetryAfterSeconds is the Retry-After value for a wait: whole seconds, rounded up, at
// least 1, so that a client retrying after it finds a token. Any goroutine.
func RetryAfterSeconds(wait time.Duration) int {
	return max(int((wait+time.Second-1)/time.Second), 1)
}

// Middleware returns middleware that limits requests by keyFn's key (called on the
// request's task): a request whose bucket is empty gets 429 Too Many Requests with a
// Retry-After (whole seconds, rounded up) and its handler does not run. In multi-thread
// mode the check runs on the loop (a round trip through Post). On a server with several
// loops each loop keeps its own table, made at its first request: the rate and burst are
// per loop, and the owning loop's table is the one Allow uses. One Limiter serves the loops
// of one server. Call it before ListenAndServe, from one goroutine.
func (l *Limiter) Middleware(keyFn func(*loop.Ctx) string) loop.Middleware {
	return func(next loop.HandlerFunc) loop.HandlerFunc {
		return func(c *loop.Ctx) {
			key := keyFn(c)
			var ok bool
			var wait time.Duration
			c.OnLoop(func() { ok, wait = l.tableOn(c.Loop()).allow(key, c.Loop().Now()) })
			if !ok {
				c.SetHeader("Retry-After", strconv.Itoa(RetryAfterSeconds(wait)))
				c.String(429, "429 Too Many Requests\n")
				return
			}
			next(c)
		}
	}
}

// tableOn returns loop lp's table, making it at lp's first request. Loop-confined: on lp.
func (l *Limiter) tableOn(lp *loop.Loop) *table {
	b := l.bind(lp)
	i := lp.Index()
	if i >= len(b.loops) || b.loops[i] != lp {
		panic(fmt.Sprintf("ratelimit: Limiter.Middleware used by a loop of another server than the one it was first used on (loop %d): a Limiter serves the loops of one server", i))
	}
	if invariants.Enabled {
		invariants.Assert(lp.OnLoop(), "ratelimit: a Limiter's table of loop %d used off that loop", i)
	}
	t := b.tables[i]
	if t == nil {
		t = new(table)
		t.init(l.cfg)
		b.tables[i] = t
	}
	return t
}

// ByAddress is a key function for Middleware: the client's IP address (Ctx.RemoteAddr,
// which behind a trusted proxy is the client the proxy names: loop.Config.TrustedProxies).
// From the request's task.
func ByAddress(c *loop.Ctx) string {
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case nil:
		return ""
	default:
		host, _, err := net.SplitHostPort(a.String())
		if err != nil {
			return a.String()
		}
		return host
	}
}
