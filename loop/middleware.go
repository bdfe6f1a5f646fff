package loop

import (
	"fmt"
	"strings"
)

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

// Use adds middleware for every route of the server, in order: the first added runs
// outermost, around the middleware of groups. Middleware wraps a route when the route is
// registered, so Use must come before the first route: Use after Handle (or a net/http
// mount, a group's Handle, a feature's Mount such as stats.Mount) panics, naming the routes already
// added, rather than leave them silently unwrapped (an auth middleware added late would
// leave them open). Routes that must not run a middleware (health probes outside auth)
// go outside the Group that adds it. With Config.Shards > 1 it applies to every shard.
// Call it before ListenAndServe, from one goroutine.
func (s *Server) Use(mw ...Middleware) {
	if s.life.load() != stateNew {
		panic("loop: Use called after ListenAndServe")
	}
	if len(s.patterns) > 0 { // every shard has the same routes
		panic(useAfterRoutes("Use", s.patterns))
	}
	if s.shards == nil {
		s.middleware = append(s.middleware, mw...)
		return
	}
	for _, sh := range s.shards.all { // every shard's routes get it
		sh.middleware = append(sh.middleware, mw...)
	}
}

// useAfterRoutes is the panic message of a Use that came after routes: it names up to
// five of them.
func useAfterRoutes(who string, patterns []string) string {
	const show = 5
	names := make([]string, 0, show)
	for _, p := range patterns[:min(len(patterns), show)] {
		names = append(names, fmt.Sprintf("%q", p))
	}
	list := strings.Join(names, ", ")
	if len(patterns) > show {
		list += fmt.Sprintf(" and %d more", len(patterns)-show)
	}
	return fmt.Sprintf("loop: %s called after %d route(s) were added (%s): middleware wraps routes as they are registered, "+
		"so these would run without it; call %s before adding routes (put routes that must not run it outside a Group that uses it)",
		who, len(patterns), list, who)
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
	srv      *Server
	parent   *Group // the group this one was made from, nil for a group of the server
	prefix   string // the whole prefix, the parents' included
	mw       []Middleware
	patterns []string // routes registered through this group and its sub-groups
}

// Use adds middleware for the group's routes and those of its sub-groups, inside the
// middleware the group already has. Like Server.Use it must come before the group's
// first route: after one (through the group or a sub-group) it panics, naming them.
func (g *Group) Use(mw ...Middleware) {
	if len(g.patterns) > 0 {
		panic(useAfterRoutes("Group.Use", g.patterns))
	}
	g.mw = append(g.mw, mw...)
}

// Group returns a nested group under g's prefix: its routes run g's middleware (also what
// g.Use adds later, before g's first route), then mw.
func (g *Group) Group(prefix string, mw ...Middleware) *Group {
	return &Group{srv: g.srv, parent: g, prefix: g.prefix + strings.TrimSuffix(prefix, "/"), mw: mw}
}

// Handle registers h for pattern ("[METHOD ]/path") under the group's prefix: "GET /x" in
// a group "/api" serves "GET /api/x". The server's middleware runs first, then the
// outermost group's, down to this group's.
func (g *Group) Handle(pattern string, h HandlerFunc, opts ...RouteOption) {
	method, path := "", pattern
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		method, path = pattern[:i+1], strings.TrimLeft(pattern[i+1:], " ")
	}
	var groups []*Group
	for p := g; p != nil; p = p.parent {
		groups = append(groups, p)
	}
	mw := append([]Middleware{}, g.srv.middleware...)
	for i := len(groups) - 1; i >= 0; i-- { // outermost group first
		mw = append(mw, groups[i].mw...)
	}
	full := method + g.prefix + path
	g.srv.handleAll(full, h, mw, opts)
	full = strings.Join(strings.Fields(full), " ")
	for _, p := range groups {
		p.patterns = append(p.patterns, full)
	}
}
