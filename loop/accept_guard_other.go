//go:build !linux

package loop

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// acceptNonblock accepts one connection on the listening socket fd and makes it
// close-on-exec and non-blocking. Without accept4 that takes three calls: as Go's net
// package does on such platforms, the accept and the close-on-exec run under
// syscall.ForkLock so that no child process started meanwhile inherits the descriptor.
func acceptNonblock(fd int) (int, error) {
	syscall.ForkLock.RLock()
	nfd, _, err := unix.Accept(fd)
	if err == nil {
		unix.CloseOnExec(nfd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, err
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		_ = unix.Close(nfd)
		return -1, err
	}
	return nfd, nil
}

// socketpair returns a connected pair of Unix stream sockets, close-on-exec, and
// non-blocking if nonblock is set. Without SOCK_CLOEXEC the flags are set after the
// creation, which runs under syscall.ForkLock like acceptNonblock's accept.
func socketpair(nonblock bool) ([2]int, error) {
	syscall.ForkLock.RLock()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fds[0])
		unix.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return fds, err
	}
	if nonblock {
		for _, fd := range fds {
			if err := unix.SetNonblock(fd, true); err != nil {
				_ = unix.Close(fds[0])
				_ = unix.Close(fds[1])
				return [2]int{-1, -1}, err
			}
		}
	}
	return fds, nil
}

// refuseNewConnections has no socket filter to attach off Linux: the listener is closed
// after the drain's grace with only its backlog swept (acceptor.beginDrain).
func refuseNewConnections(int) error { return errors.ErrUnsupported }
