// Package cors is Cross-Origin Resource Sharing for baton, as the Fetch standard
// (fetch.spec.whatwg.org, "CORS protocol") defines it: a middleware that answers
// preflight requests and adds the Access-Control-* headers to the responses of the
// origins it allows.
//
// A preflight is an OPTIONS request, and a middleware runs only for a request that
// matched a route, so mount the middleware with a route for OPTIONS on every path it
// covers: on the server (or a Group) that uses it,
//
//	s.Use(mw)
//	s.Handle("OPTIONS /{path...}", func(c *loop.Ctx) { c.Bytes(204, "", nil) })
//
// Without it a preflight gets the router's 405 and the browser refuses the request.
//
// Decisions:
//   - A request from an allowed origin gets Access-Control-Allow-Origin (the origin, or "*"
//     when any origin is allowed without credentials), Access-Control-Allow-Credentials
//     and Access-Control-Expose-Headers as configured; its handler runs as usual.
//   - A request from any other origin gets no CORS header, and its handler runs as usual:
//     the browser keeps the response from the page (a server cannot stop a cross-origin
//     simple request from being sent; refusing it is the handler's business).
//   - A preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered by
//     the middleware, never by the handler: 204 with the Access-Control-Allow-* headers
//     and Access-Control-Max-Age when the origin, the method and every requested header
//     are allowed; otherwise 403 with a one-line text body naming which, and no CORS
//     header, so the browser refuses the request and curl shows why.
//   - Unless any origin is allowed, every response gets "Vary: Origin" (a preflight's also
//     names Access-Control-Request-Method and -Headers), so that a cache never hands one
//     origin's answer to another.
package cors

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
)

// Config configures New: which cross-origin requests a browser may make, and what their
// pages may read of the responses. It is plain data, used from any goroutine; New copies
// what it needs, so changing a Config (or its slices) afterwards changes nothing.
type Config struct {
	// AllowedOrigins are the origins allowed, each as a browser sends it in the Origin
	// header: scheme://host, with :port unless it is the scheme's default
	// ("https://play.example.com", "http://localhost:5173"). Comparison ignores case.
	// The single entry "*" allows any origin; it cannot be combined with
	// AllowCredentials (the Fetch standard ignores a wildcard on credentialed requests).
	// Required.
	AllowedOrigins []string

	// AllowedMethods are the methods a preflight may ask for, beside GET, HEAD and POST
	// (which browsers send without asking). "*" allows any method. Default: none beyond
	// those three.
	AllowedMethods []string

	// AllowedHeaders are the request headers a preflight may ask for (names, any case),
	// beside Accept, Accept-Language, Content-Language and Content-Type, which are always
	// allowed (with any value: Content-Type: application/json included). "*" allows any
	// header. Default: those four only.
	AllowedHeaders []string

	// ExposedHeaders are the response headers, beside the CORS-safelisted ones
	// (Cache-Control, Content-Language, Content-Length, Content-Type, Expires,
	// Last-Modified, Pragma), that the page's script may read ("X-Request-Id"). "*"
	// exposes all, and cannot be combined with AllowCredentials.
	ExposedHeaders []string

	// AllowCredentials lets the page send cookies and HTTP authentication and read the
	// answer (Access-Control-Allow-Credentials: true). Default false.
	AllowCredentials bool

	// MaxAge is how long a browser may cache a preflight's answer, in whole seconds
	// (browsers cap it: Chromium at 2 hours, Firefox at 24). Zero sends no
	// Access-Control-Max-Age, which browsers read as 5 seconds.
	MaxAge time.Duration
}

// Validate reports the first invalid field, naming it and its value. Any goroutine.
func (c Config) Validate() error {
	if len(c.AllowedOrigins) == 0 {
		return fmt.Errorf(`cors: Config.AllowedOrigins is empty: list the origins allowed ("https://example.com"), or "*" for any`)
	}
	for i, o := range c.AllowedOrigins {
		if o == "*" {
			if len(c.AllowedOrigins) > 1 {
				return fmt.Errorf(`cors: Config.AllowedOrigins[%d] ("*") must be the only entry: it allows every origin`, i)
			}
			if c.AllowCredentials {
				return fmt.Errorf(`cors: Config.AllowedOrigins[%d] ("*") with Config.AllowCredentials (true): browsers refuse a wildcard origin on credentialed requests; list the origins`, i)
			}
			continue
		}
		if err := checkOrigin(o); err != nil {
			return fmt.Errorf("cors: Config.AllowedOrigins[%d] (%q) %v", i, o, err)
		}
	}
	if err := checkNames("AllowedMethods", c.AllowedMethods); err != nil {
		return err
	}
	if err := checkNames("AllowedHeaders", c.AllowedHeaders); err != nil {
		return err
	}
	if err := checkNames("ExposedHeaders", c.ExposedHeaders); err != nil {
		return err
	}
	if c.AllowCredentials {
		for i, h := range c.ExposedHeaders {
			if h == "*" {
				return fmt.Errorf(`cors: Config.ExposedHeaders[%d] ("*") with Config.AllowCredentials (true): browsers read "*" as a header named "*" on credentialed requests; list the headers`, i)
			}
		}
	}
	if c.MaxAge < 0 || (c.MaxAge > 0 && c.MaxAge < time.Second) {
		return fmt.Errorf("cors: Config.MaxAge (%v) must be 0 (no Access-Control-Max-Age) or at least 1s", c.MaxAge)
	}
	return nil
}

// checkOrigin reports why o is not a serialized origin, nil when it is one.
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	switch {
	case err != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "":
		return fmt.Errorf("is not an origin: want scheme://host[:port], as the Origin header has it")
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#"):
		return fmt.Errorf("has a path, query or fragment (a trailing / included): an origin is scheme://host[:port] only")
	case u.User != nil:
		return fmt.Errorf("has user information: an origin is scheme://host[:port] only")
	case u.Port() == "443" && strings.EqualFold(u.Scheme, "https"), u.Port() == "80" && strings.EqualFold(u.Scheme, "http"):
		return fmt.Errorf("names its scheme's default port, which browsers leave out of the Origin header: write %s://%s", strings.ToLower(u.Scheme), u.Hostname())
	}
	if !httpcodec.ValidHeaderValue([]byte(o)) {
		return fmt.Errorf("holds bytes no header value may")
	}
	return nil
}

// checkNames reports the first entry of the field that is neither a token nor "*".
func checkNames(field string, names []string) error {
	for i, n := range names {
		if n != "*" && !httpcodec.ValidHeaderName([]byte(n)) {
			return fmt.Errorf("cors: Config.%s[%d] (%q) is not a valid name (an HTTP token), nor \"*\"", field, i, n)
		}
	}
	return nil
}

// policy is a validated Config, ready for requests. It is not changed after New, so the
// middleware is safe for concurrent use.
type policy struct {
	anyOrigin bool
	origins   map[string]string // lower-cased origin -> the header value to send (the same)

	anyMethod bool
	methods   map[string]bool // case-sensitive, as methods are
	methodsV  string          // Access-Control-Allow-Methods

	anyHeader bool
	headers   map[string]bool // lower-cased
	headersV  string          // Access-Control-Allow-Headers when not anyHeader

	creds   bool
	expose  string // Access-Control-Expose-Headers, "" for none
	maxAge  string // Access-Control-Max-Age, "" for none
	varyAll bool   // responses vary by Origin
}

// safelistedHeaders are the request headers always allowed (lower-cased).
var safelistedHeaders = []string{"accept", "accept-language", "content-language", "content-type"}

// newPolicy builds the policy of a valid cfg.
func newPolicy(cfg Config) *policy {
	p := &policy{origins: map[string]string{}, methods: map[string]bool{"GET": true, "HEAD": true, "POST": true},
		headers: map[string]bool{}, creds: cfg.AllowCredentials}
	for _, o := range cfg.AllowedOrigins {
		if o == "*" {
			p.anyOrigin = true
			continue
		}
		p.origins[strings.ToLower(o)] = strings.ToLower(o)
	}
	p.varyAll = !p.anyOrigin
	methods := []string{"GET", "HEAD", "POST"}
	for _, m := range cfg.AllowedMethods {
		if m == "*" {
			p.anyMethod = true
		} else if !p.methods[m] {
			p.methods[m] = true
			methods = append(methods, m)
		}
	}
	p.methodsV = strings.Join(methods, ", ")
	for _, h := range safelistedHeaders {
		p.headers[h] = true
	}
	var hs []string
	for _, h := range cfg.AllowedHeaders {
		if h == "*" {
			p.anyHeader = true
		} else if l := strings.ToLower(h); !p.headers[l] {
			p.headers[l] = true
			hs = append(hs, h)
		}
	}
	p.headersV = strings.Join(append(hs, "Accept", "Accept-Language", "Content-Language", "Content-Type"), ", ")
	p.expose = strings.Join(cfg.ExposedHeaders, ", ")
	if cfg.MaxAge >= time.Second {
		p.maxAge = strconv.FormatInt(int64(cfg.MaxAge/time.Second), 10)
	}
	return p
}

// New returns the CORS middleware for cfg (see the package comment for what it answers),
// or cfg.Validate's error. Mount it with Server.Use or a Group, with a route for OPTIONS
// on the paths it covers. Any goroutine; the middleware is safe for concurrent use (it
// runs on each request's handler task).
func New(cfg Config) (loop.Middleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := newPolicy(cfg)
	return func(next loop.HandlerFunc) loop.HandlerFunc {
		return func(c *loop.Ctx) {
			if p.serve(c) {
				next(c)
			}
		}
	}, nil
}

// The headers the middleware reads and writes.
const (
	hOrigin        = "Origin"
	hRequestMethod = "Access-Control-Request-Method"
	hRequestHdrs   = "Access-Control-Request-Headers"
	hAllowOrigin   = "Access-Control-Allow-Origin"
	hAllowCreds    = "Access-Control-Allow-Credentials"
	hAllowMethods  = "Access-Control-Allow-Methods"
	hAllowHeaders  = "Access-Control-Allow-Headers"
	hExpose        = "Access-Control-Expose-Headers"
	hMaxAge        = "Access-Control-Max-Age"
	preflightVary  = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"
)

// serve applies the policy to c: it answers a preflight itself (false: the handler must
// not run) or adds the headers of an actual request (true).
func (p *policy) serve(c *loop.Ctx) bool {
	origin := c.Header(hOrigin)
	if origin != "" && c.Method() == "OPTIONS" {
		if method := c.Header(hRequestMethod); method != "" {
			p.preflight(c, origin, method)
			return false
		}
	}
	if p.varyAll {
		c.AddHeader("Vary", hOrigin)
	}
	if origin == "" {
		return true // not a CORS request
	}
	allow, ok := p.allowOrigin(origin)
	if !ok {
		return true
	}
	c.SetHeader(hAllowOrigin, allow)
	if p.creds {
		c.SetHeader(hAllowCreds, "true")
	}
	if p.expose != "" {
		c.SetHeader(hExpose, p.expose)
	}
	return true
}

// allowOrigin returns the Access-Control-Allow-Origin value for origin, ok false when
// origin is not allowed.
func (p *policy) allowOrigin(origin string) (string, bool) {
	if p.anyOrigin {
		return "*", true
	}
	v, ok := p.origins[origin]
	if !ok && hasUpper(origin) {
		v, ok = p.origins[strings.ToLower(origin)]
	}
	return v, ok
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// preflight answers a preflight request.
func (p *policy) preflight(c *loop.Ctx, origin, method string) {
	c.AddHeader("Vary", preflightVary)
	allow, ok := p.allowOrigin(origin)
	if !ok {
		c.String(403, "cors: origin not allowed\n")
		return
	}
	if !p.anyMethod && !p.methods[method] || !httpcodec.ValidHeaderName([]byte(method)) {
		c.String(403, "cors: method not allowed\n")
		return
	}
	requested := c.Header(hRequestHdrs)
	if !p.headersAllowed(requested) {
		c.String(403, "cors: request header not allowed\n")
		return
	}
	c.SetHeader(hAllowOrigin, allow)
	if p.creds {
		c.SetHeader(hAllowCreds, "true")
	}
	if p.anyMethod {
		c.SetHeader(hAllowMethods, method)
	} else {
		c.SetHeader(hAllowMethods, p.methodsV)
	}
	switch {
	case !p.anyHeader:
		c.SetHeader(hAllowHeaders, p.headersV)
	case requested != "":
		c.SetHeader(hAllowHeaders, requested) // every name in it is a token: headersAllowed
	}
	if p.maxAge != "" {
		c.SetHeader(hMaxAge, p.maxAge)
	}
	c.Bytes(204, "", nil)
}

// headersAllowed reports whether every name in an Access-Control-Request-Headers value
// (a comma-separated list, spaces and tabs around the names) is a token the policy
// allows. Empty elements are skipped, as list syntax permits.
func (p *policy) headersAllowed(list string) bool {
	for list != "" {
		var name string
		if i := strings.IndexByte(list, ','); i >= 0 {
			name, list = list[:i], list[i+1:]
		} else {
			name, list = list, ""
		}
		name = strings.Trim(name, " \t")
		if name == "" {
			continue
		}
		if !httpcodec.ValidHeaderName([]byte(name)) {
			return false
		}
		if p.anyHeader {
			continue
		}
		if !p.headers[name] && !p.headers[strings.ToLower(name)] {
			return false
		}
	}
	return true
}
