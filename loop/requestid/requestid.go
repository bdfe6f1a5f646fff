// Package requestid gives every request an id: taken from the request's X-Request-Id
// header (or another, Config.Header) when the caller sent a well-formed one, generated
// otherwise. The middleware sets the id on the response under the same header and stores
// it for the handler (Get), for context-based code and offloaded functions (FromContext),
// for the access log (accesslog.Options.RequestID) and for the request's span (otelbaton).
//
// Generated ids are a random prefix drawn once per process and a counter,
// "k2t8v0qx5mzr-1c": unique within the process, and unlikely to repeat across processes
// (60 random bits). They cost one atomic add and one small allocation. An incoming id is
// kept only when it is 1 to Config.MaxLen bytes of letters, digits and "-_.:+/=@", so a
// forged header cannot inject spaces, quotes, control bytes or log-format syntax into logs
// and spans; a malformed one is replaced by a generated id.
package requestid

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync/atomic"
	"unsafe"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
)

// Defaults of Config.
const (
	// DefaultHeader is the request and response header of the id.
	DefaultHeader = "X-Request-Id"
	// DefaultMaxLen is the longest incoming id kept: room for a UUID (36 bytes), a W3C
	// trace id (32) or a proxy's id with a prefix, not for a payload.
	DefaultMaxLen = 64
)

// maxLenLimit bounds Config.MaxLen: an id goes into every log line and span of its
// request.
const maxLenLimit = 256

// Config configures New. Its zero value takes a well-formed X-Request-Id from the request,
// generates one otherwise, and answers with it in X-Request-Id. It is plain data, used
// from any goroutine; New copies it.
type Config struct {
	// Header is the request header an incoming id is read from and the response header
	// the id is written to. It must be a valid header name. Default DefaultHeader.
	Header string

	// IgnoreIncoming generates an id for every request, never taking the caller's: for a
	// server facing clients that should not choose what the logs call their request.
	// Default false: a well-formed incoming id is kept (the id the proxy or the calling
	// service logged stays the same here).
	IgnoreIncoming bool

	// MaxLen is the longest incoming id kept, in bytes, at most 256; a longer one is
	// replaced by a generated id. Zero means DefaultMaxLen.
	MaxLen int
}

// Validate reports the first invalid field, naming it and its value. Any goroutine.
func (c Config) Validate() error {
	if c.Header != "" && !httpcodec.ValidHeaderName([]byte(c.Header)) {
		return fmt.Errorf("requestid: Config.Header (%q) is not a valid header name", c.Header)
	}
	if c.MaxLen < 0 || c.MaxLen > maxLenLimit {
		return fmt.Errorf("requestid: Config.MaxLen (%d) must be between 0 (default %d) and %d", c.MaxLen, DefaultMaxLen, maxLenLimit)
	}
	return nil
}

// New returns a middleware that gives each request its id (see the package comment),
// stores it for Get and FromContext, and sets it on the response header before the
// handler runs. Mount it with Server.Use (or a Group) before the routes, outside any
// middleware that reads the id before calling its next (the access log's and otelbaton's
// read it on either side). It returns cfg.Validate's error. Any goroutine; the
// middleware is safe for concurrent use (it runs on each request's handler task).
func New(cfg Config) (loop.Middleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Header == "" {
		cfg.Header = DefaultHeader
	}
	if cfg.MaxLen == 0 {
		cfg.MaxLen = DefaultMaxLen
	}
	return func(next loop.HandlerFunc) loop.HandlerFunc {
		return func(c *loop.Ctx) {
			b := &box{}
			if !cfg.IgnoreIncoming {
				if in := c.Header(cfg.Header); validID(in, cfg.MaxLen) {
					b.id = in
				}
			}
			if b.id == "" {
				b.generate()
			}
			c.SetValue(key{}, b)
			c.SetHeader(cfg.Header, b.id)
			next(c)
		}
	}, nil
}

// Get returns the request's id, "" when the middleware did not run for it. From the
// handler's task (or a middleware's, inside New's).
func Get(c *loop.Ctx) string {
	if b, ok := c.Value(key{}).(*box); ok {
		return b.id
	}
	return ""
}

// FromContext returns the id of the request whose context ctx is (c.Context(), the
// context an offloaded function is handed, or one derived from them), "" when there is
// none. Any goroutine.
func FromContext(ctx context.Context) string {
	if b, ok := ctx.Value(key{}).(*box); ok {
		return b.id
	}
	return ""
}

// key is the Ctx value key of the id.
type key struct{}

// box holds a request's id, and the bytes of a generated one: storing a pointer in the
// request's values costs no allocation of its own, so a generated id costs one.
type box struct {
	id  string
	buf [genLen]byte
}

// genLen is a generated id's longest length: the prefix, '-', a base-36 uint64 (13 digits).
const genLen = prefixLen + 1 + 13

// prefixLen is the random prefix's length: 12 base-32 digits, 60 bits.
const prefixLen = 12

var (
	// prefix is drawn once per process; counter numbers the ids generated since.
	prefix  = newPrefix()
	counter atomic.Uint64
)

// newPrefix draws the process's prefix from crypto/rand.
func newPrefix() [prefixLen]byte {
	const digits = "0123456789abcdefghijklmnopqrstuv"
	var p [prefixLen]byte
	_, _ = rand.Read(p[:]) // never fails (crypto/rand panics rather than return short)
	for i := range p {
		p[i] = digits[p[i]&31]
	}
	return p
}

// generate makes b's id: the prefix, '-', the next count in base 36.
func (b *box) generate() {
	n := copy(b.buf[:], prefix[:])
	b.buf[n] = '-'
	s := strconv.AppendUint(b.buf[:n+1], counter.Add(1), 36)
	b.id = unsafe.String(&s[0], len(s)) // s is b.buf, which the string keeps alive
}

// validID reports whether s is a well-formed incoming id: 1 to maxLen bytes of letters,
// digits and "-_.:+/=@".
func validID(s string, maxLen int) bool {
	if len(s) == 0 || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !idByte[s[i]] {
			return false
		}
	}
	return true
}

// idByte marks the bytes an incoming id may hold.
var idByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-_.:+/=@" {
		t[c] = true
	}
	return t
}()
