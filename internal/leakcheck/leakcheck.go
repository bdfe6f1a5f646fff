// Package leakcheck holds the goleak options baton's tests and looptest share.
package leakcheck

import "go.uber.org/goleak"

// GnetPool ignores the goroutines of gnet's package-level worker pool (ants): its janitors
// start when gnet is loaded and never stop, and its idle workers (gnet runs some
// registrations on one) wait until the pool expires them. They are not a server's: every
// goroutine a server starts is still checked. A new slice on each call; any goroutine.
func GnetPool() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*goWorker).run.func1"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	}
}
