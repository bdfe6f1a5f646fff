package loop

import (
	"net"
	"time"
)

// RequestRecord is what Config.OnRequestDone receives when a request finishes: one line of
// an access log (package loop/accesslog writes them). It is filled on the loop and valid only during the call (the server
// reuses it, and Path views the request's buffer): copy the record, and the path with
// strings.Clone, to keep them.
type RequestRecord struct {
	Time    time.Time     // the request's arrival (a bound from the loop turn that read it: docs/health.md), its start
	Method  string        // "GET", ...
	Route   string        // the matched route pattern, "" when none matched (404, 405, 503 while draining)
	Path    string        // the path as sent, without the query; valid only during the call
	Status  int           // the response status (503 when the handler deadline answered for it)
	Bytes   int64         // response bytes written to the connection, head included
	Latency time.Duration // from Time to the response complete
	OnLoop  time.Duration // time the handler ran (on the loop, or its goroutine's stretches in multi-thread mode)
	Queue   time.Duration // time waiting to run: admission queue and ready queue
	Parked  time.Duration // time parked (sleeping, waiting, offloaded, backpressure, admission queue)
	Rounds  uint64        // times the handler was scheduled
	Remote  net.Addr      // the client's address
	TaskID  uint64        // the handler's task id, 0 when no handler ran
}

// requestDone fills a record for c, which finished at now (loop clock), and calls the
// hook. Loop-confined.
func (s *Server) requestDone(c *Ctx, now int64) {
	r := &s.doneRec // reused: the record is valid only during the call
	*r = RequestRecord{
		Method: c.Method(), Route: c.pattern, Path: unsafeString(c.req.Path), Status: c.status,
		Bytes: c.bytesOut, Remote: c.remote, TaskID: c.Task.idOrZero(),
	}
	if c.headState() == headServer {
		r.Status = 503
	}
	if c.acceptedAt != 0 { // arrivedAt is set with it (arrival.go): the route figures' start
		r.Time = s.timeAt(c.arrivedAt)
		r.Latency = time.Duration(now - c.arrivedAt)
	} else {
		r.Time = s.timeAt(now)
	}
	switch {
	case c.Task.t != nil:
		st := c.Task.t.StatsAt(now)
		r.OnLoop, r.Queue, r.Parked, r.Rounds = st.OnLoop, st.QueueDelay, st.ParkedTotal(), st.Rounds
	case c.Task.g != nil:
		st := c.Task.g.stats(&c.Task)
		r.OnLoop, r.Queue, r.Parked, r.Rounds = st.OnLoop, st.QueueDelay, st.ParkedTotal(), st.Rounds
	}
	r.Queue += c.queueWait
	r.Parked += c.queueWait
	s.cfg.OnRequestDone(r)
}
