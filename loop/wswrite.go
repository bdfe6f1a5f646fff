package loop

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// writeOut hands p, a connection's gathered output, to the kernel. A WebSocket with
// nothing queued in gnet is written with a raw write(2) first: a room's broadcast makes
// one write per member in a row, and through gnet's Write each is a syscall the Go runtime
// is told about (entersyscall/exitsyscall). With one P (GOMAXPROCS 1: a server pinned to
// one core), sysmon sees the P in a syscall across two of its checks during such a run of
// writes, takes the P away and hands it to another thread, which finds nothing to do and
// sleeps again; it also keeps sysmon polling at its shortest interval. A write to a
// non-blocking socket never blocks, so the runtime need not know. What the socket does
// not take (a short write, EAGAIN) and every error go to gnet's Write, which buffers the
// rest and watches for writability, or closes the connection on the error. Loop-confined;
// the caller checked cs.writable(): its fd is still this connection's (gnet closes it
// only in the close that reports OnClose, which marks cs closed before any later write).
func (s *Server) writeOut(cs *conn, p []byte) {
	if cs.ws != nil && cs.gc.OutboundBuffered() == 0 {
		n, errno := rawWrite(cs.gc.Fd(), p)
		if errno == 0 {
			if n >= len(p) {
				return
			}
			p = p[n:]
		}
	}
	_, _ = cs.gc.Write(p) // gnet copies what the socket does not take
}

// rawWrite is write(2) without the runtime's syscall bookkeeping: for a non-blocking fd.
func rawWrite(fd int, p []byte) (int, unix.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}
