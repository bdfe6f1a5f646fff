package servers

import (
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Issue 30 asks whether sending a tick's frames to many connections in one system call
// (io_uring IORING_OP_SEND submissions) lowers the floor itself. BenchmarkFloorSend
// answers it outside the harness, where the load of the machine moves nothing but the wall
// clock: the sending thread (locked, measured with RUSAGE_THREAD, so the loopback receive
// path the kernel runs in the sender's context is included, the readers' work is not)
// sends a 122-byte frame to each of B connections, either with one write(2) each, as the
// floor does, or with B SEND entries submitted by one io_uring_enter. Figures are CPU
// nanoseconds of the sending thread per frame (cpu-ns/frame); docs/bench.md has them.

// A minimal io_uring: the rings mapped once, SEND entries only.
type uring struct {
	fd                     int
	sqHead, sqTail, sqMask *uint32
	sqArray                []uint32
	sqes                   []uringSQE
	cqHead, cqTail, cqMask *uint32
	cqes                   []uringCQE
	sqRing, cqRing, sqeMem []byte
}

type uringSQE struct {
	opcode, flags uint8
	ioprio        uint16
	fd            int32
	off, addr     uint64
	len, opFlags  uint32
	userData      uint64
	_             [24]byte
}

type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

const uringOpSend = 26

func newURing(entries uint32) (*uring, error) {
	var p uringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, errno
	}
	r := &uring{fd: int(fd)}
	var err error
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))
	if r.sqRing, err = unix.Mmap(r.fd, 0, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, err
	}
	if r.cqRing, err = unix.Mmap(r.fd, 0x8000000, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, err
	}
	if r.sqeMem, err = unix.Mmap(r.fd, 0x10000000, int(p.sqEntries)*64, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, err
	}
	at := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead, r.sqTail, r.sqMask = at(r.sqRing, p.sqOff.head), at(r.sqRing, p.sqOff.tail), at(r.sqRing, p.sqOff.ringMask)
	r.sqArray = unsafe.Slice(at(r.sqRing, p.sqOff.array), p.sqEntries)
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.cqHead, r.cqTail, r.cqMask = at(r.cqRing, p.cqOff.head), at(r.cqRing, p.cqOff.tail), at(r.cqRing, p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&r.cqRing[p.cqOff.cqes])), p.cqEntries)
	return r, nil
}

// sendAll submits one SEND of frame to every fd with one io_uring_enter, waits for their
// completions and returns the first failed one's error.
func (r *uring) sendAll(fds []int, frame []byte) error {
	tail := atomic.LoadUint32(r.sqTail)
	for i, fd := range fds {
		idx := (tail + uint32(i)) & *r.sqMask
		r.sqes[idx] = uringSQE{opcode: uringOpSend, fd: int32(fd), addr: uint64(uintptr(unsafe.Pointer(&frame[0]))),
			len: uint32(len(frame)), opFlags: unix.MSG_DONTWAIT, userData: uint64(i)}
		r.sqArray[idx] = idx
	}
	atomic.StoreUint32(r.sqTail, tail+uint32(len(fds)))
	const enterGetEvents = 1
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(len(fds)), uintptr(len(fds)), enterGetEvents, 0, 0)
	runtime.KeepAlive(frame)
	if errno != 0 {
		return errno
	}
	var err error
	head, ctail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
	for ; head != ctail; head++ {
		if c := r.cqes[head&*r.cqMask]; c.res != int32(len(frame)) && err == nil {
			err = unix.Errno(-c.res)
		}
	}
	atomic.StoreUint32(r.cqHead, head)
	return err
}

func (r *uring) close() {
	_ = unix.Munmap(r.sqeMem)
	_ = unix.Munmap(r.cqRing)
	_ = unix.Munmap(r.sqRing)
	_ = unix.Close(r.fd)
}

// loopbackPairs makes n loopback TCP connections whose far ends are drained by goroutines
// and returns the near ends' descriptors (non-blocking, TCP_NODELAY as the floor sets).
func loopbackPairs(t testing.TB, n int) []int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	fds := make([]int, n)
	for i := range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		s, err := ln.Accept()
		require.NoError(t, err)
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = io.Copy(io.Discard, s) }()
		f, err := c.(*net.TCPConn).File() // a blocking dup, owned by the test
		require.NoError(t, err)
		_ = c.Close()
		t.Cleanup(func() { _ = f.Close(); _ = s.Close() })
		fds[i] = int(f.Fd())
		require.NoError(t, unix.SetNonblock(fds[i], true))
		require.NoError(t, unix.SetsockoptInt(fds[i], unix.IPPROTO_TCP, unix.TCP_NODELAY, 1))
	}
	return fds
}

func threadCPU() int64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func BenchmarkFloorSend(b *testing.B) {
	frame := make([]byte, 122)
	for _, batch := range []int{4, 16, 64} {
		for _, mode := range []string{"write", "uring"} {
			b.Run(mode+"/batch"+itoa(batch), func(b *testing.B) {
				fds := loopbackPairs(b, batch)
				var r *uring
				if mode == "uring" {
					var err error
					if r, err = newURing(256); err != nil {
						b.Skip("io_uring unavailable:", err)
					}
					defer r.close()
				}
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.ResetTimer()
				c0 := threadCPU()
				for range b.N {
					if r != nil {
						if err := r.sendAll(fds, frame); err != nil {
							b.Fatal(err)
						}
						continue
					}
					for _, fd := range fds {
						if n, _, errno := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&frame[0])), uintptr(len(frame))); errno != 0 || int(n) != len(frame) {
							b.Fatal("write:", errno)
						}
					}
				}
				b.ReportMetric(float64(threadCPU()-c0)/float64(b.N*batch), "cpu-ns/frame")
			})
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
