package loop

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/panjf2000/gnet/v2"
	gerrors "github.com/panjf2000/gnet/v2/pkg/errors"
	"golang.org/x/sys/unix"
)

// Why the server accepts connections itself.
//
// gnet v2.10.0 treats every accept error other than EAGAIN, EINTR, ECONNRESET and
// ECONNABORTED as fatal: eventloop.accept (acceptor_unix.go:83-94, the path taken with
// WithReusePort(true)) returns errors.ErrAcceptSocket, the poller returns it
// (pkg/netpoll/poller_epoll_default.go:137-140), the loop closes every connection and the
// engine stops (reactor_default.go:79-112), and gnet.Run still returns nil because the
// engine's shutdown runs in a deferred call whose error is only logged
// (engine_unix.go:219-221, 272-278). Running out of file descriptors (EMFILE, ENFILE) or
// kernel memory (ENOBUFS, ENOMEM) at accept therefore killed the server. gnet offers no
// option or hook on that path, so the acceptor owns the listening socket instead: it
// accepts on its own goroutine and hands each connection to the loop with Engine.Register,
// and gnet itself only listens on a placeholder UDP socket on loopback, for which it never
// calls accept (eventloop.accept hands UDP listeners to readUDP, whose errors are not
// fatal).

// gnetPlaceholderAddr is the address given to gnet.Run when the acceptor owns the real
// listener: gnet needs one listener (Engine.Validate refuses an engine without), and a UDP
// socket never makes it call accept. A stray datagram reaches OnTraffic on a connection
// without a context, which the server treats like a control-socket wake-up: harmless.
const gnetPlaceholderAddr = "udp://127.0.0.1:0"

// acceptLogEvery is the least time between two log lines about failing accepts: the first
// failure is logged at once, later ones are counted and summed up in the next line.
const acceptLogEvery = 10 * time.Second

// Back-off after an accept error that shedding cannot clear, doubling up to the maximum
// (the bounds net/http uses).
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptor owns the listening socket; see "Why the server accepts connections itself".
// Its methods are safe for concurrent use unless they say otherwise.
type acceptor struct {
	ln   *net.TCPListener
	raw  syscall.RawConn
	log  *slog.Logger
	addr *net.TCPAddr

	accepted, resourceErrs, shed, otherErrs, regErrs atomic.Uint64

	mu         sync.Mutex // guards closed, draining, swept, pending, handedAt, settleFrom; serializes handing over with close
	closed     bool
	draining   bool                           // a drain began: the listener takes no new connections (beginDrain)
	drainAt    time.Time                      // when beginDrain ran
	swept      bool                           // draining, and the backlog was accepted and the listening socket closed
	pending    []<-chan gnet.RegisteredResult // registrations whose result was not seen yet
	handedAt   time.Time                      // when the last registration was queued
	settleFrom time.Time                      // when settled was first called
	quit       chan struct{}                  // closed by close
	wg         sync.WaitGroup
	eng        gnet.Engine // set by start, before the accept goroutine

	// Accept goroutine only.
	reserve       int // a descriptor on /dev/null, given up to shed a connection; -1 when none
	loggedAt      time.Time
	unlogged      uint64 // resource errors since the last log line
	unloggedSh    uint64 // connections shed since the last log line
	otherAt       time.Time
	unloggedOther uint64 // other accept errors since the last line about them
}

// listenAcceptor listens on addr (host:port) with the socket options the server used with
// gnet's own listener: SO_REUSEADDR (quick restarts) and SO_REUSEPORT (several servers on
// one address). TCP keep-alive stays off, as with gnet's listener, and so does Multipath
// TCP, which Go turns on for listeners by default (since Go 1.24, where the kernel has it):
// an MPTCP listening socket refuses the drain's socket filter (SO_ATTACH_FILTER fails
// with EOPNOTSUPP; see beginDrain), and gnet's listener was plain TCP. Call close when
// done.
func listenAcceptor(addr string, log *slog.Logger) (*acceptor, error) {
	lc := net.ListenConfig{
		KeepAlive: -1,
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
					return
				}
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			})
			return errors.Join(err, serr)
		},
	}
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	ln := l.(*net.TCPListener)
	raw, err := ln.SyscallConn()
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	a := &acceptor{
		ln:      ln,
		raw:     raw,
		log:     log,
		addr:    ln.Addr().(*net.TCPAddr),
		quit:    make(chan struct{}),
		reserve: openReserve(),
	}
	return a, nil
}

// Addr is the address the acceptor listens on (the port the kernel chose for port 0).
func (a *acceptor) Addr() *net.TCPAddr { return a.addr }

// start begins accepting and handing connections to eng. Call it once, when the loop is
// reachable (connections arriving before wait in the kernel's backlog).
func (a *acceptor) start(eng gnet.Engine) {
	a.eng = eng
	a.wg.Add(1)
	go a.acceptLoop(eng)
}

// close stops accepting: the listening socket is closed (connections still in its backlog
// are reset by the kernel) and close returns once the acceptor's goroutines have ended.
// Registrations still in flight are abandoned; see handOver. Idempotent.
func (a *acceptor) close() {
	a.shut()
	a.wg.Wait()
	if a.reserve >= 0 {
		_ = unix.Close(a.reserve)
		a.reserve = -1
	}
}

// shut closes the listening socket and tells the goroutines to end, without waiting.
func (a *acceptor) shut() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.closed = true
		close(a.quit)
		_ = a.ln.Close()
	}
}

// stats returns the acceptor's counters.
func (a *acceptor) stats() accounting.AcceptStats {
	return accounting.AcceptStats{
		Accepted:        a.accepted.Load(),
		ResourceErrors:  a.resourceErrs.Load(),
		Shed:            a.shed.Load(),
		OtherErrors:     a.otherErrs.Load(),
		RegisterErrored: a.regErrs.Load(),
	}
}

func openReserve() int {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// isResourceError reports an accept error caused by the process or the system running out
// of descriptors or memory: the pending connection is fine, the server cannot take it now.
func isResourceError(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) ||
		errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM)
}

func (a *acceptor) acceptLoop(eng gnet.Engine) {
	defer a.wg.Done()
	backoff := time.Duration(0)
	for {
		c, err := a.ln.AcceptTCP()
		if err == nil {
			backoff = 0
			if !a.handOver(eng, c) {
				return
			}
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && a.isDraining() {
			a.sweep(eng) // the drain's grace is over (beginDrain)
			return
		}
		if isResourceError(err) {
			a.resourceErrs.Add(1)
			a.unlogged++
			n := a.shedPending()
			a.logResourceError(err)
			if n > 0 {
				continue // the backlog is drained or accepting works again
			}
		} else {
			a.otherErrs.Add(1)
			a.unloggedOther++
			a.logOtherError(err)
		}
		// Nothing could be accepted: wait before trying again rather than spin.
		backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
		t := time.NewTimer(backoff)
		select {
		case <-a.quit:
			t.Stop()
			return
		case <-t.C:
		}
		if a.reserve < 0 {
			a.reserve = openReserve()
		}
	}
}

// shedPending accepts and closes at once the connections waiting in the backlog while the
// process is out of descriptors, using the reserve descriptor as the one slot for them:
// their clients get a prompt close instead of hanging until they time out, and the loop
// is not woken for each. It returns how many it shed; 0 when the reserve is gone (another
// goroutine took its slot) or the failure is not about descriptors. Accept goroutine only.
func (a *acceptor) shedPending() int {
	n := 0
	for a.reserve >= 0 {
		_ = unix.Close(a.reserve)
		a.reserve = -1
		var nfd int
		var aerr error
		if err := a.raw.Control(func(fd uintptr) {
			nfd, aerr = acceptNonblock(int(fd))
		}); err != nil {
			aerr = err
		}
		if aerr == nil {
			_ = unix.Close(nfd)
			n++
		}
		a.reserve = openReserve()
		if aerr != nil {
			break // EAGAIN (drained), or still failing: leave it to the back-off
		}
	}
	if n > 0 {
		a.shed.Add(uint64(n))
		a.unloggedSh += uint64(n)
	}
	return n
}

// logResourceError logs the first resource error at once and then at most one line per
// acceptLogEvery, with the counts since the previous line. Accept goroutine only.
func (a *acceptor) logResourceError(err error) {
	now := time.Now()
	if !a.loggedAt.IsZero() && now.Sub(a.loggedAt) < acceptLogEvery {
		return
	}
	a.loggedAt = now
	a.log.Error("loop: accept failed: out of file descriptors or kernel memory; shedding new connections until some are free",
		"err", err, "failures", a.unlogged, "shed", a.unloggedSh,
		"failures_total", a.resourceErrs.Load(), "shed_total", a.shed.Load())
	a.unlogged, a.unloggedSh = 0, 0
}

// logOtherError logs an accept error that is not about resources like logResourceError:
// the first at once, then at most one line per acceptLogEvery. Accept goroutine only.
func (a *acceptor) logOtherError(err error) {
	now := time.Now()
	if !a.otherAt.IsZero() && now.Sub(a.otherAt) < acceptLogEvery {
		return
	}
	a.otherAt = now
	a.log.Warn("loop: accept failed; retrying", "err", err, "failures", a.unloggedOther, "failures_total", a.otherErrs.Load())
	a.unloggedOther = 0
}

// drainListenGrace is how long the listener of a draining server goes on accepting the
// connections whose handshake was already under way (it takes no new ones): their last
// ACK arrives within a round trip.
const drainListenGrace = 100 * time.Millisecond

// drainListenMinGrace is the part of drainListenGrace a stop waits for when the drain ended
// sooner (acceptor.settled): the loop keeps turning meanwhile, so it is kept short.
const drainListenMinGrace = 10 * time.Millisecond

// beginDrain stops the listener taking new connections when a drain begins, without
// resetting any it already took. Closing the listening socket at once would reset every
// connection in its backlog (the kernel does, unless net.ipv4.tcp_migrate_req moves them
// to another socket of the SO_REUSEPORT group), and a handshake completing between a last
// accept and the close would be reset too. So: a socket filter drops new SYNs from now on
// (their clients retry within a second and find the port closed, or another process on
// it); handshakes under way complete; for drainListenGrace the accept goroutine goes on
// handing connections to the loop, which answers them 503 (a draining server runs no new
// request); then it accepts what is left in the backlog and closes the socket (sweep).
// Without the filter (off Linux, or if attaching it fails) the window between that last
// accept and the close stays: a few microseconds on an idle machine, but milliseconds when
// the accept goroutine waits for a CPU in between, and every connection completed in it is
// reset (TestDrainAnswersOrRefusesEveryConnection lost up to 15 a run that way on a loaded
// 2-core machine, its listener being Multipath TCP). Safe for concurrent use.
func (a *acceptor) beginDrain() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.draining {
		return
	}
	a.draining = true
	a.drainAt = time.Now()
	var ferr error
	if err := a.raw.Control(func(fd uintptr) { ferr = refuseNewConnections(int(fd)) }); err != nil {
		ferr = err
	}
	// errors.ErrUnsupported itself is the answer off Linux (accept_guard_other.go); an
	// errno such as EOPNOTSUPP on Linux means the filter should work here and did not,
	// and the drain then loses the connections that reach the listener as it closes.
	if ferr != nil && ferr != errors.ErrUnsupported {
		a.log.Warn("loop: could not stop the listener taking new connections at the drain's start; connections arriving as it closes may be reset",
			"addr", a.addr, "err", ferr)
	}
	// Wakes the accept goroutine's Accept when the grace is over (acceptLoop, sweep).
	_ = a.ln.SetDeadline(time.Now().Add(drainListenGrace))
}

// isDraining reports whether beginDrain ran.
func (a *acceptor) isDraining() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.draining
}

// sweep ends a drain's accepting: it hands every connection still in the backlog to the
// loop (the listener's deadline has passed, so Accept would return at once without them)
// and closes the listening socket. Accept goroutine only.
func (a *acceptor) sweep(eng gnet.Engine) {
	for {
		var nfd int
		var aerr error
		if err := a.raw.Control(func(fd uintptr) { nfd, aerr = acceptNonblock(int(fd)) }); err != nil {
			break
		}
		if errors.Is(aerr, unix.EINTR) || errors.Is(aerr, unix.ECONNABORTED) {
			continue
		}
		if aerr != nil {
			break // EAGAIN: the backlog is empty (or descriptors ran out: nothing more to do)
		}
		f := os.NewFile(uintptr(nfd), "")
		c, err := net.FileConn(f) // a duplicate: f is closed below either way
		_ = f.Close()
		if err != nil {
			continue
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			_ = c.Close()
			continue
		}
		if !a.handOver(eng, tc) {
			break // the acceptor closed meanwhile (the stop)
		}
	}
	a.mu.Lock()
	a.swept = true
	_ = a.ln.Close()
	a.mu.Unlock()
}

// handOver gives c to the loop. It reports false once the acceptor is closed or the
// engine is stopping.
//
// Engine.Register duplicates the descriptor on a gnet worker goroutine and queues the
// registration on the loop; if the loop stops before running it, that worker waits forever
// (gnet v2.10.0 eventloop.enroll, eventloop_unix.go:188-197) and the duplicate stays open.
// Closing the acceptor when a drain begins keeps that window empty for graceful stops.
func (a *acceptor) handOver(eng gnet.Engine, c *net.TCPConn) bool {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		_ = c.Close()
		return false
	}
	ch, err := eng.Register(gnet.NewNetConnContext(context.Background(), c))
	if err == nil {
		// The result is not waited for (that would add a cross-thread wake-up to every
		// connection): it is collected without blocking, here and by settled.
		a.pruneLocked()
		a.pending = append(a.pending, ch)
		a.handedAt = time.Now()
	}
	a.mu.Unlock()
	if err != nil {
		_ = c.Close()
		a.regErrs.Add(1)
		return !errors.Is(err, gerrors.ErrEngineInShutdown) && !errors.Is(err, gerrors.ErrEmptyEngine)
	}
	a.accepted.Add(1)
	return true
}

// pruneLocked drops the registrations that have finished, counting those that failed
// (typically EMFILE when gnet duplicates the descriptor; gnet then closes the connection).
// It never blocks. Call it with a.mu held.
func (a *acceptor) pruneLocked() {
	kept := a.pending[:0]
	for _, ch := range a.pending {
		select {
		case res, ok := <-ch:
			if ok && res.Err != nil {
				a.regErrs.Add(1)
			}
		default:
			kept = append(kept, ch)
		}
	}
	clear(a.pending[len(kept):])
	a.pending = kept
}

// settled closes the acceptor (without waiting for its goroutine) and reports whether no
// registration is still on its way to the loop. Registrations queued on the loop run only
// while the loop keeps turning: gnet drops what is queued behind the task that stops the
// engine, and the worker that queued it then waits forever (eventloop_unix.go:188-197).
// Call it on the loop before stopping the engine, and keep the loop turning while it
// reports false; settleLimit after the last registration (or after the first call, if
// later) it reports true regardless (a registration that failed before reaching the loop
// is collected, but one stuck elsewhere must not hold the stop).
func (a *acceptor) settled() bool {
	a.mu.Lock()
	if a.settleFrom.IsZero() {
		a.settleFrom = time.Now()
		if a.draining && !a.swept && !a.closed {
			// The drain ended within its grace: sweep once the handshakes that were under
			// way when it began (on loopback or a LAN, a millisecond) have completed.
			_ = a.ln.SetDeadline(a.drainAt.Add(drainListenMinGrace))
		}
	}
	sweeping := a.draining && !a.swept && !a.closed && time.Since(a.settleFrom) <= settleLimit
	a.mu.Unlock()
	if sweeping {
		return false // the backlog is still being handed over (sweep)
	}
	a.shut()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pruneLocked()
	// Each registration gets settleLimit from its hand-over at least: a sweep that ran
	// late (its goroutine waited for a CPU) must not leave its last connections no time to
	// reach the loop, or they would hang, never answered nor closed.
	return len(a.pending) == 0 || time.Since(later(a.settleFrom, a.handedAt)) > settleLimit
}

// later returns the later of two times.
func later(x, y time.Time) time.Time {
	if y.After(x) {
		return y
	}
	return x
}

// settleLimit bounds how long settled holds a stop for registrations in flight; they
// normally land within one loop turn.
const settleLimit = time.Second

// serveGuard is the server's side of accepting connections. The zero value is ready;
// listen, gnetAddr, addr and finish are called by ListenAndServe's goroutine (addr also in
// OnBoot), start and stopAccepting on the loop.
type serveGuard struct {
	acc atomic.Pointer[acceptor]
}

// listen opens the listening socket on addr. Call it before gnet.Run, and pass gnetAddr to
// gnet.Run instead of the address; a bind error is ListenAndServe's to return.
func (g *serveGuard) listen(addr string, log *slog.Logger) error {
	a, err := listenAcceptor(addr, log)
	if err != nil {
		return err
	}
	g.acc.Store(a)
	return nil
}

// gnetAddr is the address to give gnet.Run: a placeholder, see gnetPlaceholderAddr.
func (g *serveGuard) gnetAddr() string { return gnetPlaceholderAddr }

// addr is the address the server listens on.
func (g *serveGuard) addr() *net.TCPAddr { return g.acc.Load().Addr() }

// start begins accepting into eng; call it once the loop is reachable.
func (g *serveGuard) start(eng gnet.Engine) { g.acc.Load().start(eng) }

// stopAccepting closes the listening socket without waiting (connections still in the
// kernel's backlog are reset; with SO_REUSEPORT new ones go to the other servers on the
// address). Call it on the loop when the engine is about to stop. Idempotent.
func (g *serveGuard) stopAccepting() {
	if a := g.acc.Load(); a != nil {
		a.shut()
	}
}

// beginDrain is acceptor.beginDrain: the listener takes no new connections, and what it
// took is handed to the loop. Call it on the loop when a drain begins.
func (g *serveGuard) beginDrain() {
	if a := g.acc.Load(); a != nil {
		a.beginDrain()
	}
}

// settled is acceptor.settled; true when the server has no acceptor. Loop only.
func (g *serveGuard) settled() bool {
	if a := g.acc.Load(); a != nil {
		return a.settled()
	}
	return true
}

// finish closes the acceptor and waits for its goroutine; call it after gnet.Run returned.
func (g *serveGuard) finish() {
	if a := g.acc.Load(); a != nil {
		a.close()
	}
}

// acceptStats returns the counts of the server's acceptor: connections accepted, accepts
// that failed for lack of descriptors or memory, connections shed. Safe for concurrent
// use; zero before ListenAndServe.
func (s *Server) acceptStats() accounting.AcceptStats {
	a := s.guard.acc.Load()
	if a == nil {
		return accounting.AcceptStats{}
	}
	return a.stats()
}
