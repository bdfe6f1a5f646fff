package loop

// A request head parsed inside its connection's OnTraffic, when gnet's ring buffer held
// nothing from an earlier read, lies in gnet's read buffer, which is neither overwritten
// nor freed until OnTraffic returns: gnet's Peek then returns the read buffer itself, and
// Discard only reslices it. (With input left in the ring buffer, Peek returns the ring's
// memory or a buffer from gnet's pool, which a Discard may hand back to the pool, where
// another goroutine may take it.) gnet moves what is left of the read buffer into the ring
// buffer when OnTraffic returns, and only then, so conn.carried, set as OnTraffic returns
// from what is left, tells whether the ring may hold bytes at the next OnTraffic; a Discard
// in between (a pump's serve) can only empty it, which errs towards copying. OnTraffic
// sets conn.direct around its serve when the ring was empty and the server runs handlers
// on the loop. Most requests finish within their first
// slice, inside that call (serve, or a chain on the previous request's coroutine), so
// their head is not copied at all: the Ctx's views point into the read buffer
// (Ctx.headInBuf). A request that parks, yields or is queued for admission outlives the
// read buffer, and serve copies its head into the Ctx's arena (keepHead) before it
// returns, before gnet can read into the buffer again. Between the park and that copy
// only serveStep's early return runs: it does not parse past a request in flight.
//
// What may read the views meanwhile: the handler and the loop, on the loop goroutine. The
// Ctx's accessors return copies, so no view escapes to user code; the router's parameters
// are views of the path and are looked up again once the path is copied. Requests with a
// body, heads parsed outside OnTraffic (a pump's serve reads gnet's ring buffer, whose
// memory a Discard may hand back to gnet's pool) and multi-thread mode copy at once, as
// before. An upgrade to WebSocket copies first (the WebSocket reader consumes the same
// input).

// keepHead copies c's head out of gnet's read buffer into c's arena, if it is still
// there. Loop-confined.
func (s *Server) keepHead(c *Ctx) {
	if !c.headInBuf {
		return
	}
	c.headInBuf = false
	c.arena = c.req.CopyTo(&c.req, c.arena[:0])
	if c.params.Len() > 0 && c.route != nil {
		// The values are views of the old path: match the copy (same method and path,
		// same routes: the same route and values).
		s.router.Lookup(unsafeString(c.req.Method), unsafeString(c.req.Path), &c.params)
	}
}

// noteCarried records, as OnTraffic returns, whether gnet is about to keep unparsed input
// of cs in its ring buffer (it moves what is left of the read buffer there). Loop-confined.
func (s *Server) noteCarried(cs *conn) {
	if cs.state != connClosed {
		cs.carried = cs.gc.InboundBuffered() > 0
	}
}
