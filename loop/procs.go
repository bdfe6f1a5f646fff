package loop

import (
	"log/slog"
	"os"
	"runtime"
)

// spareProc gives the Go runtime one P more than the process has event loops when it has
// no more Ps than loops (GOMAXPROCS 1 with one loop: a process limited to one CPU by its
// affinity or its container's quota; or Config.Shards at or above GOMAXPROCS), unless keep
// is set or the GOMAXPROCS environment variable chose the number.
//
// Why: the loop goroutine waits for I/O inside gnet's epoll_wait, a blocking system call
// the runtime sees as such, so while the loop is idle its P sits in a system call. With
// one P nothing else can run meanwhile: the runtime's timers (which wake the loop's
// sleeping tasks, such as a room's tick), the acceptor and the offload workers wait until
// sysmon takes the P away from the system call, which it does after 20 µs or more by
// waking another thread; when epoll_wait returns, the loop's thread must get a P back,
// often by waking yet another thread. sysmon itself then stays at its shortest polling
// interval (20 µs), each poll a timer interrupt and two context switches. A second P
// stays idle while the loop waits, so sysmon leaves the system call alone and backs off,
// and the other goroutines run on the idle P without a hand-off. It does not give the
// process more CPU: the OS still runs it where its affinity or quota allows. Setting it
// turns off the runtime's own updates of GOMAXPROCS (when a container's quota changes).
// docs/websocket.md has the measurements (ws-broadcast). It returns the GOMAXPROCS it
// found and the one it left.
func spareProc(keep bool, loops int, getenv func(string) string, gomaxprocs func(int) int, log *slog.Logger) (from, to int) {
	from = gomaxprocs(0)
	if keep || from > loops || getenv("GOMAXPROCS") != "" {
		return from, from
	}
	to = loops + 1
	gomaxprocs(to)
	log.Info("loop: raised GOMAXPROCS so that the runtime keeps a P while the event loops wait in epoll_wait (Config.KeepGOMAXPROCS or the GOMAXPROCS variable keeps it)",
		"from", from, "to", to, "loops", loops)
	return from, to
}

// raiseGOMAXPROCS is spareProc for the process, which runs loops event loops (shards).
func raiseGOMAXPROCS(keep bool, loops int, log *slog.Logger) {
	spareProc(keep, loops, os.Getenv, runtime.GOMAXPROCS, log)
}
