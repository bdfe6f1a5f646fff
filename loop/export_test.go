package loop

import "context"

// StopEngine stops s's gnet engine behind the server's back, the way a fatal loop error
// ends it, for the external tests.
func StopEngine(s *Server) error { return (*s.eng.Load()).Stop(context.Background()) }

// ErrEngineStopped is what ListenAndServe's error wraps when the event loop stopped by
// itself (unexported: a caller needs only "not ErrServerClosed").
var ErrEngineStopped = errEngineStopped
