package loop

import (
	"context"
	"runtime/pprof"
)

// With Config.ProfileLabels a request's handler runs with the pprof label "route" set to
// its route pattern on the goroutine that runs it: the task's coroutine (single-thread
// mode) or the handler's goroutine (multi-thread mode). Goroutine labels stay with the
// goroutine across parks, and a coroutine runs only the task it was given until that task
// ends, so setting them once when the handler starts labels every slice of the task; they
// are cleared when it returns, so a pooled coroutine serving a background task next (or
// idle) is not counted against the route. The label context is made once per route, in
// Handle, so that a request costs two label switches and no allocation.

// noLabels is the label set of a coroutine between requests.
var noLabels = context.Background()

// routeLabels returns the label context of a route pattern.
func routeLabels(pattern string) context.Context {
	return pprof.WithLabels(context.Background(), pprof.Labels("route", pattern))
}

// setRouteLabels sets r's labels on the current goroutine (a multi-thread handler's).
func setRouteLabels(r *route) { pprof.SetGoroutineLabels(r.labels) }

// runLabelled runs c's handler with its route's labels on the current goroutine. On c's
// task.
func (s *Server) runLabelled(c *Ctx) {
	pprof.SetGoroutineLabels(c.route.labels)
	c.route.h(c)
	pprof.SetGoroutineLabels(noLabels)
}
