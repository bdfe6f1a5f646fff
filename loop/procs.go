package loop

import (
	"log/slog"
	"os"
	"runtime"
)

// spareProc gives the Go runtime a second P when it has only one (GOMAXPROCS 1: a process
// limited to one CPU by its affinity or its container's quota), unless keep is set or the
// GOMAXPROCS environment variable chose the number.
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
func spareProc(keep bool, getenv func(string) string, gomaxprocs func(int) int, log *slog.Logger) (from, to int) {
	from = gomaxprocs(0)
	if keep || from != 1 || getenv("GOMAXPROCS") != "" {
		return from, from
	}
	gomaxprocs(2)
	log.Info("loop: raised GOMAXPROCS from 1 to 2 so that the runtime keeps a P while the loop waits in epoll_wait (Config.KeepGOMAXPROCS or the GOMAXPROCS variable keeps 1)")
	return from, 2
}

// raiseGOMAXPROCS is spareProc for the process.
func raiseGOMAXPROCS(keep bool, log *slog.Logger) {
	spareProc(keep, os.Getenv, runtime.GOMAXPROCS, log)
}
