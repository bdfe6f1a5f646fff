package loop

import "golang.org/x/sys/unix"

// acceptNonblock accepts one connection on the listening socket fd, non-blocking and
// close-on-exec in the same call (accept4).
func acceptNonblock(fd int) (int, error) {
	nfd, _, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	return nfd, err
}

// socketpair returns a connected pair of Unix stream sockets, close-on-exec, and
// non-blocking if nonblock is set, each in the same call as the socket's creation.
func socketpair(nonblock bool) ([2]int, error) {
	typ := unix.SOCK_STREAM | unix.SOCK_CLOEXEC
	if nonblock {
		typ |= unix.SOCK_NONBLOCK
	}
	return unix.Socketpair(unix.AF_UNIX, typ, 0)
}
