package httpcodec

// Header is one field line: a name and a value. In a parsed Request both
// are views into the parser's input buffer; the value has its leading and
// trailing whitespace removed.
type Header struct {
	Name, Value []byte
}

// Request is a parsed request head. Every []byte field is a view into the
// buffer passed to ParseHead (or into the arena passed to CopyTo): it is
// valid only while that buffer is neither modified nor reused, and must not
// be appended to or written (they share the buffer). Use CopyTo to keep a
// request beyond that. A Request is meant to be reused from request
// to request so that its Headers slice keeps its capacity; it is not safe
// for concurrent use.
type Request struct {
	// Method is the request method, any token ("GET", "PROPFIND", ...).
	// Methods are case-sensitive.
	Method []byte

	// Target is the request-target exactly as sent: origin-form
	// ("/p?q"), absolute-form ("http://h/p?q"), "*" (OPTIONS only) or
	// authority-form ("host:port", CONNECT only).
	Target []byte

	// Path is the path part of Target: Target up to the first '?' for
	// origin-form; the path after the authority for absolute-form (empty,
	// not "/", when the absolute URI has no path); "*" for asterisk-form;
	// nil for authority-form. It is not percent-decoded, but its
	// percent-encodings are checked to be well formed.
	Path []byte

	// RawQuery is the part of Target after the first '?', without the '?';
	// nil when there is no '?', empty when the '?' ends the target.
	RawQuery []byte

	// ProtoMinor is 0 for HTTP/1.0 and 1 for HTTP/1.1.
	ProtoMinor int

	// Headers holds every field line in order; repeated fields are kept as
	// separate entries. The slice is reused across requests.
	Headers []Header

	// Host is the value of the Host header (nil if absent, which is only
	// allowed for HTTP/1.0). For absolute-form targets the authority in
	// Target is the one that counts (RFC 9112 §3.2.2); Host is not
	// rewritten.
	Host []byte

	// ContentLength is the declared Content-Length, or -1 when there is
	// none (which, for a request that is not chunked, means no body).
	ContentLength int64

	// Chunked reports "Transfer-Encoding: chunked"; the body is then
	// framed by chunks and ContentLength is -1.
	Chunked bool

	// KeepAlive reports whether the connection may stay open after the
	// response: HTTP/1.1 defaults to true, HTTP/1.0 to false; a
	// "Connection: close" token makes it false, a "keep-alive" token makes
	// an HTTP/1.0 request true.
	KeepAlive bool

	// Expect100 reports "Expect: 100-continue" on an HTTP/1.1 request that
	// has a body: the caller should send AppendContinue (or a final
	// status) before waiting for the body. It is false for HTTP/1.0 (RFC
	// 9110 §10.1.1: the expectation must be ignored) and when there is no
	// body to wait for.
	Expect100 bool

	// Upgrade is the value of the Upgrade header when the Connection header
	// carries the "upgrade" token, else nil. The codec does not act on it.
	Upgrade []byte

	// HeadLen is the length of the head in bytes, including the empty
	// lines skipped before the request line and the empty line that ends
	// the head. The body (if any) starts at this offset of the buffer
	// passed to ParseHead.
	HeadLen int
}

// Get returns the value of the first header whose name equals name,
// ignoring ASCII case, and whether there was one.
func (r *Request) Get(name string) ([]byte, bool) {
	for i := range r.Headers {
		if equalFold(r.Headers[i].Name, name) {
			return r.Headers[i].Value, true
		}
	}
	return nil, false
}

// Reset clears r for reuse, keeping the capacity of Headers.
func (r *Request) Reset() {
	h := r.Headers
	clear(h)
	*r = Request{Headers: h[:0], ContentLength: -1}
}

// CopyTo copies r into dst so that it no longer refers to the parser's
// buffer: every view (Method, Target, Path, RawQuery, each header name and
// value, Host, Upgrade) is appended to arena and dst's views point into the
// result, which is returned (keep it with dst). Nil views stay nil. The
// other fields are copied as they are. dst.Headers is reused. dst may be
// r itself, which moves r's views out of the parser's buffer. CopyTo
// allocates nothing when arena and dst.Headers have enough capacity; when
// arena is too small it grows it once.
func (r *Request) CopyTo(dst *Request, arena []byte) []byte {
	need := len(r.Method) + len(r.Target) + len(r.Path) + len(r.RawQuery) +
		len(r.Host) + len(r.Upgrade)
	for i := range r.Headers {
		need += len(r.Headers[i].Name) + len(r.Headers[i].Value)
	}
	if cap(arena)-len(arena) < need {
		grown := make([]byte, len(arena), len(arena)+need)
		copy(grown, arena)
		arena = grown
	}
	hdrs := dst.Headers[:0]
	*dst = *r
	dst.Method, arena = copyView(arena, r.Method)
	dst.Target, arena = copyView(arena, r.Target)
	dst.Path, arena = copyView(arena, r.Path)
	dst.RawQuery, arena = copyView(arena, r.RawQuery)
	dst.Host, arena = copyView(arena, r.Host)
	dst.Upgrade, arena = copyView(arena, r.Upgrade)
	for _, h := range r.Headers {
		var c Header
		c.Name, arena = copyView(arena, h.Name)
		c.Value, arena = copyView(arena, h.Value)
		hdrs = append(hdrs, c)
	}
	dst.Headers = hdrs
	return arena
}

// copyView appends v to arena and returns the copy (capacity-limited so that
// appending to it cannot overwrite its neighbours) and the grown arena.
func copyView(arena, v []byte) ([]byte, []byte) {
	if v == nil {
		return nil, arena
	}
	start := len(arena)
	arena = append(arena, v...)
	return arena[start:len(arena):len(arena)], arena
}
