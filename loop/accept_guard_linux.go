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

// refuseNewConnections attaches a socket filter to the listening socket fd that drops
// every segment with SYN set and ACK clear: new connections are no longer taken, while
// handshakes under way complete (their last ACK passes). On a TCP socket the filter sees
// the segment from its TCP header, whose byte 13 holds the flags.
func refuseNewConnections(fd int) error {
	const (
		syn = 0x02
		ack = 0x10
	)
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 13},         // A = the TCP flags
		{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: syn | ack}, // A &= SYN|ACK
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: syn, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},          // a new connection's SYN: drop
		{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff}, // anything else: keep
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}
