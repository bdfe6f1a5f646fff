package ws

import "golang.org/x/sys/unix"

// bytesAcked returns how many bytes the peer of socket fd has acknowledged so far
// (tcpi_bytes_acked), or 0 if it cannot be read. Only output the client took moves it:
// bytes the server queues do not. Loop-confined (it reads a connection's fd).
func bytesAcked(fd int) uint64 {
	if fd < 0 {
		return 0
	}
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0
	}
	return ti.Bytes_acked
}
