package loop

import (
	"time"

	"github.com/batonrt/baton/accounting"
)

// requestDone fills a record for c, which finished at now (loop clock), and calls the
// hook. Loop-confined.
func (s *Server) requestDone(c *Ctx, now int64) {
	r := &s.doneRec // reused: the record is valid only during the call
	*r = accounting.RequestRecord{
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
