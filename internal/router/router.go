// Package router matches HTTP methods and paths against registered patterns.
//
// A [Router] maps (method, path) pairs to handler values of any type H and
// extracts path parameters into a caller-owned [Params]. It is a segment trie:
// paths are split on '/' and matched segment by segment, with static segments
// preferred over {param} segments, which are preferred over a trailing
// {rest...} segment. Matching backtracks, so the most specific route that
// matches the whole path (and the method) wins.
//
// Pattern syntax is a simplified form of Go 1.22 net/http.ServeMux patterns:
//
//	"GET /users/{id}"       method and path
//	"/users/{id}"           no method: matches every method
//	"/files/{rest...}"      {rest...} as the last segment matches the remainder
//
// Matching works on the raw (still escaped) request path; nothing is
// unescaped or cleaned. "/a/" and "/a" are different paths, and a pattern
// ending in "/" (like "/static/") matches only that exact path: it is not a
// prefix match as in net/http. Use "/static/{rest...}" for prefix matching.
//
// Concurrency: routes are added with [Router.Add] before serving. Add must not
// run concurrently with any other method. After the last Add, [Router.Lookup]
// never mutates the Router, so any number of goroutines may call it
// concurrently, each with its own [Params].
//
// The package is a leaf: it imports only the standard library.
package router

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Errors returned (wrapped) by [Router.Add]. Every error message starts with
// "router: "; test for the kind with [errors.Is].
var (
	// ErrInvalidPattern reports a pattern with bad syntax.
	ErrInvalidPattern = errors.New("router: invalid pattern")
	// ErrDuplicatePattern reports a pattern whose method and path shape are
	// already registered (parameter names do not count: "GET /u/{id}" and
	// "GET /u/{name}" are duplicates).
	ErrDuplicatePattern = errors.New("router: duplicate pattern")
)

// Result is the outcome of [Router.Lookup]. The zero value is NotFound.
// Result values are plain data, safe to use from any goroutine.
type Result uint8

const (
	// NotFound means no pattern matches the path for any method (answer 404).
	NotFound Result = iota
	// Found means a route matched; the handler and pattern are valid.
	Found
	// MethodNotAllowed means some pattern matches the path but none for the
	// request method (answer 405 with the returned Allow value).
	MethodNotAllowed
)

// String returns the constant's name, e.g. "MethodNotAllowed".
func (r Result) String() string {
	switch r {
	case NotFound:
		return "NotFound"
	case Found:
		return "Found"
	case MethodNotAllowed:
		return "MethodNotAllowed"
	}
	return fmt.Sprintf("Result(%d)", uint8(r))
}

// inlineParams is the number of parameters Params holds without allocating.
const inlineParams = 8

// Params holds the path parameters of a matched route. Values are substrings
// of the path passed to [Router.Lookup]; names belong to the matched route.
// Up to 8 parameters are stored without allocation; more are supported but
// allocate once (the spill buffer is kept across [Params.Reset]).
//
// The zero value is empty and ready to use. A Params is not safe for
// concurrent use: use one per goroutine (typically one per connection or
// request) and reuse it across lookups.
type Params struct {
	n      int
	names  []string // the matched route's names; shared, never modified
	values [inlineParams]string
	more   []string // values beyond inlineParams
}

// Len returns the number of parameters.
func (p *Params) Len() int { return p.n }

// Name returns the name of parameter i, in pattern order ("rest" for
// "{rest...}"). It panics if i is not in [0, Len()).
func (p *Params) Name(i int) string {
	p.check(i)
	return p.names[i]
}

// Value returns the value of parameter i, in pattern order. It panics if i is
// not in [0, Len()).
func (p *Params) Value(i int) string {
	p.check(i)
	if i < inlineParams {
		return p.values[i]
	}
	return p.more[i-inlineParams]
}

// Get returns the value of the parameter called name and whether it exists.
// A {rest...} parameter may exist with an empty value.
func (p *Params) Get(name string) (string, bool) {
	for i := 0; i < p.n; i++ {
		if p.names[i] == name {
			return p.Value(i), true
		}
	}
	return "", false
}

// Reset empties p, dropping references to the previous path. [Router.Lookup]
// calls it before matching.
func (p *Params) Reset() {
	p.values = [inlineParams]string{}
	clear(p.more)
	p.more = p.more[:0]
	p.names = nil
	p.n = 0
}

func (p *Params) check(i int) {
	if i < 0 || i >= p.n {
		panic(fmt.Sprintf("router: param index %d out of range [0,%d)", i, p.n))
	}
}

// set stores the value of parameter i. Matching sets values only once a
// route has matched, deepest parameter first.
func (p *Params) set(i int, v string) {
	if i < inlineParams {
		p.values[i] = v
		return
	}
	k := i - inlineParams
	if k >= len(p.more) {
		p.more = append(p.more, make([]string, k+1-len(p.more))...)
	}
	p.more[k] = v
}

// Router maps HTTP methods and paths to handlers of type H.
//
// The zero value is an empty router ready to use. Add must be called only
// while no other goroutine uses the Router (routes are added before
// serving); after the last Add, Lookup may be called concurrently from any
// number of goroutines because it never mutates the Router.
type Router[H any] struct {
	root *node[H]
	n    int
}

// route is one registered pattern.
type route[H any] struct {
	method  string // "" for method-less routes
	pattern string // canonical "METHOD /path" or "/path"
	names   []string
	h       H
}

// staticEdge is a static child of a node.
type staticEdge[H any] struct {
	seg   string
	child *node[H]
}

// mapThreshold is the number of static children above which a node also
// indexes them in a map.
const mapThreshold = 8

// node is one position in the segment trie. The path from the root to a node
// is a sequence of segment kinds (static value, param, rest).
type node[H any] struct {
	statics  []staticEdge[H]
	staticM  map[string]*node[H] // non-nil when len(statics) > mapThreshold
	param    *node[H]            // child for "{name}"
	rest     *node[H]            // terminal child for "{name...}"
	methods  []*route[H]         // routes with a method, in insertion order
	anyRoute *route[H]           // method-less route, if any
	allow    string              // Allow value for this node's methods
}

func (n *node[H]) hasRoutes() bool { return n.anyRoute != nil || len(n.methods) > 0 }

func (n *node[H]) staticChild(seg string) *node[H] {
	if n.staticM != nil {
		return n.staticM[seg]
	}
	for i := range n.statics {
		if n.statics[i].seg == seg {
			return n.statics[i].child
		}
	}
	return nil
}

// routeFor returns the route at n serving method: an exact method route, then
// (for HEAD) a GET route, then the method-less route.
func (n *node[H]) routeFor(method string) *route[H] {
	for _, r := range n.methods {
		if r.method == method {
			return r
		}
	}
	if method == "HEAD" {
		for _, r := range n.methods {
			if r.method == "GET" {
				return r
			}
		}
	}
	return n.anyRoute
}

// segKind classifies a pattern segment.
type segKind uint8

const (
	kindStatic segKind = iota
	kindParam
	kindRest
)

type patSeg struct {
	kind segKind
	s    string // static text or parameter name
}

// Add registers pattern → h.
//
// A pattern is an optional method and a path separated by spaces or tabs:
// "GET /users/{id}" or "/users/{id}". The method must be an HTTP token
// (matched case-sensitively); without one the route matches every method,
// with lower precedence than explicit-method routes of the same shape. A
// GET route also serves HEAD unless a HEAD route of the same shape exists.
//
// The path must start with '/'. Each '/'-separated segment is either static
// text, "{name}" (matches one non-empty segment) or, as the last segment
// only, "{name...}" (matches the rest of the path, possibly empty and
// possibly containing '/'). Names must be Go-identifier-like and unique within
// the pattern; different routes may use different names at the same
// position. Braces elsewhere in a segment, spaces, control characters, '?'
// and '#' are invalid. A trailing "/" is not special: "/static/" matches only
// "/static/".
//
// Add returns an error wrapping [ErrInvalidPattern] for bad syntax or
// [ErrDuplicatePattern] when the same method and path shape is already
// registered; the Router is unchanged on error. Add must not be called
// concurrently with any other method of r.
func (r *Router[H]) Add(pattern string, h H) error {
	method, segs, canon, err := parsePattern(pattern)
	if err != nil {
		return err
	}
	if r.root == nil {
		r.root = &node[H]{}
	}
	// Find the target node without creating anything, so that a duplicate
	// leaves the trie untouched (a duplicate implies the full path exists).
	n := r.root
	for i := 0; n != nil && i < len(segs); i++ {
		n = lookupChild(n, segs[i])
	}
	if n != nil {
		if old := existing(n, method); old != nil {
			return fmt.Errorf("%w %q: same method and path shape as %q", ErrDuplicatePattern, pattern, old.pattern)
		}
	}
	n = r.root
	for _, s := range segs {
		n = makeChild(n, s)
	}
	rt := &route[H]{method: method, pattern: canon, h: h}
	for _, s := range segs {
		if s.kind != kindStatic {
			rt.names = append(rt.names, s.s)
		}
	}
	if method == "" {
		n.anyRoute = rt
	} else {
		n.methods = append(n.methods, rt)
		n.allow = allowString(methodsOf(n, nil))
	}
	r.n++
	return nil
}

// Len returns the number of registered routes. It may be called concurrently
// with Lookup but not with Add.
func (r *Router[H]) Len() int { return r.n }

func existing[H any](n *node[H], method string) *route[H] {
	if method == "" {
		return n.anyRoute
	}
	for _, rt := range n.methods {
		if rt.method == method {
			return rt
		}
	}
	return nil
}

func lookupChild[H any](n *node[H], s patSeg) *node[H] {
	switch s.kind {
	case kindParam:
		return n.param
	case kindRest:
		return n.rest
	}
	return n.staticChild(s.s)
}

func makeChild[H any](n *node[H], s patSeg) *node[H] {
	if c := lookupChild(n, s); c != nil {
		return c
	}
	c := &node[H]{}
	switch s.kind {
	case kindParam:
		n.param = c
	case kindRest:
		n.rest = c
	default:
		n.statics = append(n.statics, staticEdge[H]{seg: s.s, child: c})
		if n.staticM != nil || len(n.statics) > mapThreshold {
			if n.staticM == nil {
				n.staticM = make(map[string]*node[H], len(n.statics))
				for _, e := range n.statics {
					n.staticM[e.seg] = e.child
				}
			}
			n.staticM[s.s] = c
		}
	}
	return c
}

// methodsOf appends the explicit methods of n's routes to dst.
func methodsOf[H any](n *node[H], dst []string) []string {
	for _, rt := range n.methods {
		dst = append(dst, rt.method)
	}
	return dst
}

// allowString builds a sorted, de-duplicated, comma-separated Allow value,
// adding HEAD when GET is present. It sorts ms in place.
func allowString(ms []string) string {
	if slices.Contains(ms, "GET") {
		ms = append(ms, "HEAD")
	}
	slices.Sort(ms)
	ms = slices.Compact(ms)
	return strings.Join(ms, ", ")
}

// parsePattern validates pattern and splits it into method, path segments
// and canonical form.
func parsePattern(pattern string) (method string, segs []patSeg, canon string, err error) {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidPattern, pattern, why)
	}
	path := pattern
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		method = pattern[:i]
		path = strings.TrimLeft(pattern[i:], " \t")
		if method == "" {
			return "", nil, "", bad("leading space")
		}
		for j := 0; j < len(method); j++ {
			if !isTokenChar(method[j]) {
				return "", nil, "", bad("method is not a token")
			}
		}
	}
	if path == "" || path[0] != '/' {
		return "", nil, "", bad("path must start with '/'")
	}
	for j := 0; j < len(path); j++ {
		if c := path[j]; c <= ' ' || c == 0x7f || c == '?' || c == '#' {
			return "", nil, "", bad(fmt.Sprintf("invalid character %q in path", c))
		}
	}
	raw := strings.Split(path[1:], "/")
	segs = make([]patSeg, 0, len(raw))
	seen := map[string]bool{}
	for i, s := range raw {
		if !strings.ContainsAny(s, "{}") {
			segs = append(segs, patSeg{kindStatic, s})
			continue
		}
		if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
			return "", nil, "", bad(fmt.Sprintf("segment %q: a wildcard must be a whole segment", s))
		}
		name := s[1 : len(s)-1]
		kind := kindParam
		if n, ok := strings.CutSuffix(name, "..."); ok {
			if i != len(raw)-1 {
				return "", nil, "", bad(fmt.Sprintf("segment %q: {name...} must be the last segment", s))
			}
			name, kind = n, kindRest
		}
		if !isName(name) {
			return "", nil, "", bad(fmt.Sprintf("segment %q: bad wildcard name", s))
		}
		if seen[name] {
			return "", nil, "", bad(fmt.Sprintf("duplicate wildcard name %q", name))
		}
		seen[name] = true
		segs = append(segs, patSeg{kind, name})
	}
	canon = path
	if method != "" {
		canon = method + " " + path
	}
	return method, segs, canon, nil
}

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// isName reports whether s is a valid wildcard name: an ASCII identifier.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// Lookup finds the route for method and path. path is the raw request path
// without the query; it is not unescaped or cleaned, and a path not starting
// with '/' never matches.
//
// On Found it returns the handler, the matched route's canonical pattern
// (e.g. "GET /users/{id}", suitable as an accounting label; a HEAD request
// served by a GET route reports the GET pattern) and fills ps with the
// parameters, whose values are substrings of path. Otherwise h is the zero
// value, pattern is "" and ps is empty. On MethodNotAllowed, allow lists the
// methods that would match the path, sorted and comma-separated (e.g.
// "GET, HEAD, POST"; HEAD is included whenever GET is); on Found and NotFound
// allow is "". ps may be nil if parameters are not needed.
//
// Precedence: segment by segment, static text beats {param}, which beats
// {rest...}; among routes of the same shape an exact method beats GET (for
// HEAD), which beats a method-less route. A less specific route is used when
// the more specific ones fail to match the rest of the path or the method.
//
// Lookup does not allocate on Found or NotFound (with ≤ 8 parameters). It
// never mutates r, so after the last Add it may be called concurrently from
// any number of goroutines, each with its own ps.
func (r *Router[H]) Lookup(method, path string, ps *Params) (h H, pattern string, res Result, allow string) {
	if ps != nil {
		ps.Reset()
	}
	if r.root == nil || path == "" || path[0] != '/' {
		return h, "", NotFound, ""
	}
	if rt := match(r.root, method, path, 0, 0, ps); rt != nil {
		if ps != nil {
			ps.names = rt.names
			ps.n = len(rt.names)
		}
		return rt.h, rt.pattern, Found, ""
	}
	var buf [4]*node[H]
	leaves := collect(r.root, path, 0, buf[:0])
	switch len(leaves) {
	case 0:
		return h, "", NotFound, ""
	case 1:
		return h, "", MethodNotAllowed, leaves[0].allow
	}
	var ms []string
	for _, n := range leaves {
		ms = methodsOf(n, ms)
	}
	return h, "", MethodNotAllowed, allowString(ms)
}

// nextSeg returns the segment starting after the '/' at path[i] and the
// index where it ends (the next '/' or len(path)).
func nextSeg(path string, i int) (seg string, end int) {
	start := i + 1
	end = strings.IndexByte(path[start:], '/')
	if end < 0 {
		end = len(path)
	} else {
		end += start
	}
	return path[start:end], end
}

// match returns the most specific route serving method for the remainder of
// path starting at i (i == len(path), or path[i] == '/'), below n. depth is
// the number of parameters bound so far.
func match[H any](n *node[H], method, path string, i, depth int, ps *Params) *route[H] {
	if i == len(path) {
		return n.routeFor(method)
	}
	seg, end := nextSeg(path, i)
	if c := n.staticChild(seg); c != nil {
		if rt := match(c, method, path, end, depth, ps); rt != nil {
			return rt
		}
	}
	if n.param != nil && seg != "" {
		if rt := match(n.param, method, path, end, depth+1, ps); rt != nil {
			if ps != nil {
				ps.set(depth, seg)
			}
			return rt
		}
	}
	if n.rest != nil {
		if rt := n.rest.routeFor(method); rt != nil {
			if ps != nil {
				ps.set(depth, path[i+1:])
			}
			return rt
		}
	}
	return nil
}

// collect appends to dst every node below n that holds routes (for any
// method) and matches the remainder of path starting at i.
func collect[H any](n *node[H], path string, i int, dst []*node[H]) []*node[H] {
	if i == len(path) {
		if n.hasRoutes() {
			dst = append(dst, n)
		}
		return dst
	}
	seg, end := nextSeg(path, i)
	if c := n.staticChild(seg); c != nil {
		dst = collect(c, path, end, dst)
	}
	if n.param != nil && seg != "" {
		dst = collect(n.param, path, end, dst)
	}
	if n.rest != nil && n.rest.hasRoutes() {
		dst = collect(n.rest, path, len(path), dst)
	}
	return dst
}
