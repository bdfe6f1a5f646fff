package loop

import "strings"

// Middleware wraps a handler: it runs code before and after the handler (or instead of
// it), and may hand request-scoped values to it with Ctx.SetValue. Middleware runs on the
// handler's own task, under the same rules as the handler.
type Middleware func(next HandlerFunc) HandlerFunc

// chain wraps h in mw, the first element outermost.
func chain(h HandlerFunc, mw []Middleware) HandlerFunc {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// Use adds middleware for the routes registered after it, in order: the first added runs
// outermost. With Config.Shards > 1 it applies to every shard. Call it before
// ListenAndServe, from one goroutine.
func (s *Server) Use(mw ...Middleware) {
	if s.life.load() != stateNew {
		panic("loop: Use called after ListenAndServe")
	}
	if s.shards == nil {
		s.middleware = append(s.middleware, mw...)
		return
	}
	for _, sh := range s.shards.all { // every shard's routes get it
		sh.middleware = append(sh.middleware, mw...)
	}
}

// Group returns a route group: its routes' paths start with prefix (e.g. "/api/v1") and
// they run mw inside the server's middleware. Call it and the group's methods before
// ListenAndServe, from one goroutine.
func (s *Server) Group(prefix string, mw ...Middleware) *Group {
	return &Group{srv: s, prefix: strings.TrimSuffix(prefix, "/"), mw: mw}
}

// Group registers routes under a path prefix with middleware of their own. Its methods are
// called before ListenAndServe, from one goroutine.
type Group struct {
	srv    *Server
	prefix string
	mw     []Middleware
}

// Use adds middleware for the group's routes registered after it.
func (g *Group) Use(mw ...Middleware) { g.mw = append(g.mw, mw...) }

// Group returns a nested group under g's prefix, with g's middleware and mw.
func (g *Group) Group(prefix string, mw ...Middleware) *Group {
	return &Group{srv: g.srv, prefix: g.prefix + strings.TrimSuffix(prefix, "/"), mw: append(append([]Middleware{}, g.mw...), mw...)}
}

// Handle registers h for pattern ("[METHOD ]/path") under the group's prefix: "GET /x" in
// a group "/api" serves "GET /api/x". The server's middleware runs first, then the group's.
func (g *Group) Handle(pattern string, h HandlerFunc, opts ...RouteOption) {
	method, path := "", pattern
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		method, path = pattern[:i+1], strings.TrimLeft(pattern[i+1:], " ")
	}
	mw := append(append([]Middleware{}, g.srv.middleware...), g.mw...)
	g.srv.handleAll(method+g.prefix+path, h, mw, opts)
}
