package loop

import "github.com/batonrt/baton/internal/router"

// routeMemo remembers the route of the last request whose match had no path parameters,
// by its method and path: a pipelined batch, or a client polling one URL, asks for the
// same route again and again, and comparing two short byte strings costs less than a
// walk of the router's tree. The routes do not change once the server serves (Handle
// clears the memo all the same), so the memo answers what Lookup would. Loop-confined.
type routeMemo struct {
	key     []byte // the method, then the path; nil: no entry
	methodN int    // the method's length in key
	get     bool   // the method is GET: compared with a constant, inline
	r       *route
	pattern string
}

// maxMemoKey bounds the method and path a memo entry copies.
const maxMemoKey = 256

// lookupRoute is router.Lookup for c's method and path (into c.params), through the memo.
// c.params must be empty (releaseCtx leaves it so). Loop-confined.
func (s *Server) lookupRoute(c *Ctx) (*route, string, router.Result, string) {
	m, p, memo := c.req.Method, c.req.Path, &s.routes
	if memo.methodN == len(m) && len(memo.key) == len(m)+len(p) && memo.key != nil &&
		(memo.get && string(m) == "GET" || !memo.get && sameBytes(memo.key[:len(m)], m)) &&
		sameBytes(memo.key[len(m):], p) {
		return memo.r, memo.pattern, router.Found, ""
	}
	return s.lookupRouteMissed(c)
}

// sameBytes reports whether a and b, of one length, hold the same bytes. Up to 8 bytes (a
// method, a short path) a loop costs less than runtime.memequal's call.
func sameBytes(a, b []byte) bool {
	if len(a) > 8 || len(b) != len(a) {
		return string(a) == string(b)
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// lookupRouteMissed is lookupRoute when the memo does not hold the request's route: the
// router's lookup, remembered when it may be. Out of line: a repeated request's path
// stays short (docs/bench.md, "The split of loop").
//
//go:noinline
func (s *Server) lookupRouteMissed(c *Ctx) (*route, string, router.Result, string) {
	m, p, memo := c.req.Method, c.req.Path, &s.routes
	r, pattern, res, allow := s.router.Lookup(unsafeString(m), unsafeString(p), &c.params)
	if res == router.Found && c.params.Len() == 0 && len(m)+len(p) <= maxMemoKey {
		memo.key = append(append(memo.key[:0], m...), p...)
		memo.methodN, memo.get, memo.r, memo.pattern = len(m), string(m) == "GET", r, pattern
	}
	return r, pattern, res, allow
}
