// Package compress gzip-codes large responses for clients that accept it, with the
// compression run in the server's offload pool, never on the loop: the handler's task
// parks while a pool worker compresses, and the loop serves other connections meanwhile.
//
// A handler answers with Bytes or JSON where it would call Ctx.Bytes or Ctx.JSON:
//
//	s.Handle("GET /leaderboard", func(c *loop.Ctx) {
//		_ = compress.JSON(c, 200, board.Top(1000))
//	})
//
// The body is gzip-coded, with Content-Encoding: gzip, when all of these hold:
//   - the status has a body to code (not 204, 304 nor 206, whose byte ranges are of the
//     uncoded body), and the request is not HEAD (its body is never sent, so it is not
//     compressed: the head describes the uncoded body, Content-Length included);
//   - the body is at least Config.MinSize bytes (default 1 KiB: a smaller body and the
//     response head fit one TCP segment of a 1500-byte MTU, so coding it saves no packet
//     and costs a trip to the pool);
//   - its content type is in Config.Types (default: text, JSON, JavaScript, XML, SVG and
//     WebAssembly);
//   - the request's Accept-Encoding accepts gzip (by name or "*", q above 0 and no lower
//     than identity's: "gzip;q=0" refuses it, so does a missing header);
//   - the pool accepts the call (when its queue is full or the server is stopping, the body
//     goes out uncoded rather than wait), and the coded body is smaller.
//
// Every response whose body could be coded (the first three conditions, HEAD aside) gets
// "Vary: Accept-Encoding", coded or not, so that a cache never hands a coded body to a
// client that did not ask for one. An ETag the handler set is sent unchanged on both
// representations: make it weak (W/"...") on a route answered through this package. A
// body the handler coded itself (with its own Content-Encoding) goes through Ctx.Bytes,
// not Bytes, which cannot see that header and would code it again.
//
// # Why there is no middleware that compresses whatever a handler writes
//
// A net/http compression middleware wraps the ResponseWriter. A loop.Ctx has none to
// wrap: Ctx.Bytes and Ctx.JSON write the response head and body into the connection's
// output at once, and a middleware sees nothing of them after next returns. So the
// handler chooses compression by calling this package's Bytes or JSON. New's middleware
// only sets the Config for the routes it covers (Server.Use or a Group); routes outside
// it use the defaults. Streamed responses (Ctx.Stream) are not compressed.
//
// # Goroutines
//
// Bytes and JSON are called from the handler's own task (or goroutine, in multi-thread
// mode), like the Ctx methods they replace; they park it while the pool compresses.
// Config is plain data; New and Config.Validate may be called from any goroutine.
package compress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// Defaults of Config (see its fields for why).
const (
	defaultLevel   = 1
	defaultMinSize = 1024
)

// defaultTypes are the media types compressed when Config.Types is empty: the text
// formats a game backend answers with. Images, audio, video and archives are already
// compressed.
var defaultTypes = []string{
	"text/*",
	"application/json", "application/x-ndjson", "application/problem+json", "application/ld+json",
	"application/manifest+json", "application/geo+json",
	"application/javascript", "application/xml", "application/xhtml+xml", "application/rss+xml",
	"application/atom+xml", "image/svg+xml", "application/wasm",
}

// Config configures New's middleware: which responses are compressed and how hard. Its
// zero value is the default every route outside such a middleware gets. It is plain data,
// used from any goroutine; New copies it.
type Config struct {
	// Level is gzip's compression level, from 1 (fastest) to 9 (smallest). Zero means 1,
	// as nginx's default: on game JSON the higher levels save a fifth to a quarter more
	// bytes for several times (level 9: tens of times) the CPU (docs/deployment.md,
	// "Compressing large responses", has the figures), and a game server is shorter of
	// CPU than of bandwidth.
	Level int

	// MinSize is the smallest body compressed, in bytes; smaller ones go out as they are.
	// Zero means 1024: a body below 1 KiB fits one TCP segment with its head, so coding it
	// saves no packet while its trip to the pool costs more than the bytes it saves.
	MinSize int

	// Types are the media types compressed ("application/json"), compared without case
	// and without the Content-Type's parameters; "text/*" names every subtype, "*/*" every
	// type. Empty means the defaults: text/*, JSON (application/json, x-ndjson and the
	// problem+, ld+, manifest+ and geo+json types), application/javascript, XML
	// (application/xml, xhtml+xml, rss+xml, atom+xml), image/svg+xml and
	// application/wasm.
	Types []string
}

// Validate reports the first invalid field, naming it and its value. Any goroutine.
func (c Config) Validate() error {
	if c.Level < 0 || c.Level > 9 {
		return fmt.Errorf("compress: Config.Level (%d) must be 0 (default %d) or from 1 (fastest) to 9 (smallest)", c.Level, defaultLevel)
	}
	if c.MinSize < 0 {
		return fmt.Errorf("compress: Config.MinSize (%d) must be 0 (default %d) or a size in bytes", c.MinSize, defaultMinSize)
	}
	for i, t := range c.Types {
		typ, sub, ok := strings.Cut(t, "/")
		switch {
		case !ok || !httpcodec.ValidHeaderName([]byte(typ)) || !httpcodec.ValidHeaderName([]byte(sub)):
			return fmt.Errorf("compress: Config.Types[%d] (%q) is not a media type: want type/subtype (\"application/json\"), type/* or */*, without parameters", i, t)
		case typ == "*" && sub != "*":
			return fmt.Errorf("compress: Config.Types[%d] (%q): a wildcard type needs a wildcard subtype (*/*)", i, t)
		}
	}
	return nil
}

// policy is a validated Config, ready for responses. It is not changed after newPolicy,
// so it is safe for concurrent use.
type policy struct {
	level   int
	minSize int
	any     bool     // */*: every type
	exact   []string // type/subtype, lower-cased
	prefix  []string // "type/" of the type/* entries, lower-cased
}

// newPolicy builds the policy of a valid cfg.
func newPolicy(cfg Config) *policy {
	p := &policy{level: cfg.Level, minSize: cfg.MinSize}
	if p.level == 0 {
		p.level = defaultLevel
	}
	if p.minSize == 0 {
		p.minSize = defaultMinSize
	}
	types := cfg.Types
	if len(types) == 0 {
		types = defaultTypes
	}
	for _, t := range types {
		t = strings.ToLower(t)
		switch {
		case t == "*/*":
			p.any = true
		case strings.HasSuffix(t, "/*"):
			p.prefix = append(p.prefix, t[:len(t)-1])
		default:
			p.exact = append(p.exact, t)
		}
	}
	return p
}

// defaultPolicy serves the routes outside any New middleware.
var defaultPolicy = newPolicy(Config{})

// policyKey is the request value under which New's middleware leaves its policy.
type policyKey struct{}

// New returns a middleware that sets cfg for the routes it covers: Bytes and JSON called
// by their handlers compress by cfg instead of the defaults. It compresses nothing by
// itself (see the package comment for why). It returns cfg.Validate's error. Any
// goroutine; the middleware is safe for concurrent use (it runs on each request's
// handler task).
func New(cfg Config) (loop.Middleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := newPolicy(cfg)
	return func(next loop.HandlerFunc) loop.HandlerFunc {
		return func(c *loop.Ctx) {
			c.SetValue(policyKey{}, p)
			next(c)
		}
	}, nil
}

// policyOf returns the policy of c's route.
func policyOf(c *loop.Ctx) *policy {
	if p, ok := c.Value(policyKey{}).(*policy); ok {
		return p
	}
	return defaultPolicy
}

// Bytes answers like Ctx.Bytes (status, a Content-Type omitted if empty, body), with the
// body gzip-coded in the offload pool when the request, the status, the type and the size
// allow it (the package comment lists the conditions).
//
// The response is written in every case, coded or not. The error is nil, or says why a
// body that qualified went out uncoded: the pool refused the call (offload.ErrQueueFull,
// offload.ErrClosed), or the request was cancelled while the body was being compressed
// (the client left, the handler deadline passed; what is written then is dropped or, after
// the deadline's 503, ignored, as with any write).
//
// body must not be modified after the call: a pool worker reads it while compressing, and
// after a cancellation it may still be reading it when Bytes has returned. Call Bytes from
// the handler's own task (or goroutine, in multi-thread mode); it parks the task while the
// body is compressed. It panics where Ctx.Bytes would (a response already written).
func Bytes(c *loop.Ctx, status int, contentType string, body []byte) error {
	_, err := send(c, policyOf(c), status, contentType, body)
	return err
}

// JSON answers like Ctx.JSON (status and v encoded as JSON, Content-Type
// application/json), with the body gzip-coded as Bytes codes it. v is encoded on the
// calling task, so it may be state only that task may read; the compression runs in the
// pool. If v cannot be encoded, JSON answers as Ctx.JSON does (500, the error logged) and
// returns the encoding error; otherwise it returns what Bytes would. Call it from the
// handler's own task (or goroutine, in multi-thread mode).
func JSON(c *loop.Ctx, status int, v any) error {
	e := encoders.Get().(*encoder)
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		e.release()
		c.JSON(status, v) // answers 500 and logs the error through the server's logger
		return err
	}
	reusable, err := send(c, policyOf(c), status, "application/json", e.buf.Bytes())
	if reusable {
		e.release()
	} // else a pool worker may still read e.buf: it is left to the collector
	return err
}

// send writes the response, compressed when p and the request allow it. reusable is
// false when a pool worker may still read body (a cancelled compression).
func send(c *loop.Ctx, p *policy, status int, contentType string, body []byte) (reusable bool, err error) {
	if !p.codable(status, contentType, len(body)) {
		c.Bytes(status, contentType, body)
		return true, nil
	}
	c.AddHeader("Vary", "Accept-Encoding")
	if c.Method() == "HEAD" || !acceptsGzip(c) {
		c.Bytes(status, contentType, body)
		return true, nil
	}
	out, err := offload.Do(c, func(ctx context.Context) (*bytes.Buffer, error) {
		return p.compress(ctx, body)
	})
	if err != nil {
		c.Bytes(status, contentType, body)
		return false, err
	}
	if out.Len() >= len(body) { // incompressible: the coded body would only be larger
		c.Bytes(status, contentType, body)
	} else {
		c.SetHeader("Content-Encoding", "gzip")
		c.Bytes(status, contentType, out.Bytes()) // copies the bytes into the connection's output
	}
	releaseBuffer(out)
	return true, nil
}

// codable reports whether a response of this status, type and size is compressed for a
// client that accepts gzip.
func (p *policy) codable(status int, contentType string, n int) bool {
	if n < p.minSize || status == 204 || status == 304 || status == 206 {
		return false
	}
	if p.any {
		return true
	}
	mt, _, _ := strings.Cut(contentType, ";")
	mt = trimOWS(mt)
	for _, t := range p.exact {
		if strings.EqualFold(mt, t) {
			return true
		}
	}
	for _, pre := range p.prefix {
		if len(mt) > len(pre) && strings.EqualFold(mt[:len(pre)], pre) {
			return true
		}
	}
	return false
}

// acceptsGzip reads every Accept-Encoding field of the request (a list may be split over
// several).
func acceptsGzip(c *loop.Ctx) bool {
	p := noCodings
	for name, v := range c.Headers() {
		if strings.EqualFold(name, "Accept-Encoding") {
			p.add(v)
		}
	}
	return p.gzipOK()
}

// chunk is how much of a body is compressed between two looks at the call's context, so
// that a cancelled call gives its token back soon.
const chunk = 64 << 10

// hookCompressing, when set (by tests, before the server starts), is called by the pool
// worker once the first chunk of a body has been compressed.
var hookCompressing func()

// compress gzip-codes body at p's level into a pooled buffer. It runs on a pool worker.
func (p *policy) compress(ctx context.Context, body []byte) (*bytes.Buffer, error) {
	out := buffers.Get().(*bytes.Buffer)
	out.Reset()
	zw := writers[p.level].Get().(*gzip.Writer)
	zw.Reset(out)
	defer writers[p.level].Put(zw)
	for off := 0; off < len(body); off += chunk {
		if err := ctx.Err(); err != nil {
			zw.Reset(io.Discard) // drop the writer's hold on out, which is left to the collector
			return nil, err
		}
		_, _ = zw.Write(body[off:min(off+chunk, len(body))]) // a bytes.Buffer takes every write
		if off == 0 && hookCompressing != nil {
			hookCompressing()
		}
	}
	_ = zw.Close()
	return out, nil
}

// writers pools gzip writers per level (index 1 to 9): a writer's state is hundreds of
// KiB, too much to make per response.
var writers [10]sync.Pool

func init() {
	for level := 1; level <= 9; level++ {
		writers[level].New = func() any {
			zw, err := gzip.NewWriterLevel(nil, level)
			if err != nil {
				panic("compress: " + err.Error()) // levels 1-9 are valid: unreachable
			}
			return zw
		}
	}
}

// maxPooledBuffer is the largest buffer kept for reuse: a rare huge response does not pin
// its memory in the pool.
const maxPooledBuffer = 1 << 20

// buffers pools the coded bodies' buffers.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func releaseBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		buffers.Put(b)
	}
}

// encoder is a pooled JSON encoder with the buffer it writes to.
type encoder struct {
	buf bytes.Buffer
	enc *json.Encoder // writes to buf; escapes HTML as json.Marshal (Ctx.JSON) does
}

var encoders = sync.Pool{New: func() any {
	e := new(encoder)
	e.enc = json.NewEncoder(&e.buf)
	return e
}}

func (e *encoder) release() {
	if e.buf.Cap() <= maxPooledBuffer {
		encoders.Put(e)
	}
}
