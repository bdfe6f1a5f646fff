//go:build linux

package servers

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/bench/arena"
)

// The floor target: the least a server can do for the traffic of the rooms,
// ws-broadcast and arena scenarios on Linux, so that its CPU per unit of work is the
// physical limit the other targets are measured against. One goroutine locked to one
// thread runs everything around one epoll set (level-triggered), with raw system calls:
//
//   - one read(2) per readiness into a shared buffer; only the bytes of an incomplete
//     request or frame are kept per connection;
//   - just enough HTTP/1.1 to answer the scenarios' routes (request line, the headers
//     the routes need, a Content-Length body; keep-alive) and the WebSocket upgrade;
//   - just enough RFC 6455 to consume client frames: masked frames unmasked in place,
//     pings answered, a close echoed, inputs parsed; fragments, unmasked or oversized
//     frames close the connection with 1002/1009;
//   - the ticks in a binary heap of absolute deadlines, slept on with epoll_pwait2
//     (nanosecond timeout; epoll_wait's milliseconds where the kernel lacks it), with
//     baton's timer slack (floorSlack): a timer wake-up comes no sooner than 500 µs
//     after the last one, so that dense deadlines share wake-ups (without it, 250 rooms
//     at 20 Hz wake the thread 5,000 times a second, which costs more kernel time than
//     baton spends);
//   - one write(2) of the frame, encoded once per tick, per player per tick; what the
//     kernel does not take waits in a per-connection buffer written on EPOLLOUT, and a
//     connection with more than floorMaxPending bytes waiting is closed as a slow
//     consumer (1008), as baton does;
//   - no accounting, no logging, no allocation per message.
//
// The scenario figures the harness reads (RoomStats through the same tickRecorder as
// the other targets, WSStats) are kept as the others keep them.

const (
	floorReadBuf    = 64 << 10 // the shared read buffer
	floorMaxHeader  = 8 << 10  // request head limit (431 past it)
	floorMaxBody    = 16 << 10 // request body limit (413 past it)
	floorMaxFrame   = 16 << 10 // client frame payload limit (1009 past it)
	floorMaxPending = 1 << 20  // bytes waiting for a slow reader before it is closed (1008)
	floorEvents     = 512
	floorSlack      = int64(500 * time.Microsecond) // loop/alarm.go's timerSlack
	wsGUID          = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
)

// What a connection is after its upgrade.
const (
	floorHTTP = iota
	floorWSBroadcast
	floorWSArena
)

type floorConn struct {
	fd      int
	kind    int
	rest    []byte // bytes of an incomplete request or frame
	out     []byte // bytes the kernel did not take yet
	closing bool   // close once out is written (a close frame, Connection: close)
	dead    bool

	bcRoom, bcIdx int // ws-broadcast: room and index among its members
	ar            *floorArenaRoom
	slot          int
}

type floorTimer struct {
	at     int64 // deadline, ns since floor.base
	period int64
	n      uint64 // tick number of at (1: the first)
	dead   bool
	run    func(now time.Time, deadline int64)
}

type floorRoom struct { // the rooms scenario's room
	heavy  bool
	state  *RoomState
	inputs []Input
}

type floorBCRoom struct { // a ws-broadcast room
	members []*floorConn
	seq     uint64
	frame   [4 + WSPayload]byte // header (0x82, 126, length) and payload
}

type floorArenaRoom struct {
	id    int
	sim   *arena.Sim
	conns [arena.Players]*floorConn
	n     int
	frame [2 + arena.StateSize]byte
	t     *floorTimer
}

type floor struct {
	epfd, lfd, efd int
	base           time.Time
	now            time.Time // this turn's clock reading
	conns          []*floorConn
	timers         []*floorTimer // a min-heap on at
	rbuf           []byte
	wbuf           []byte // one response being built
	toClose        []*floorConn
	noPwait2       bool
	lastTimers     int64 // when timers last ran (ns since base)

	// rooms scenario
	rooms     map[string]*floorRoom
	roomSetup RoomSetup
	rec       *tickRecorder
	// ws-broadcast
	bc        map[int]*floorBCRoom
	bcStarted bool
	bcStats   WSStats
	// arena
	arenas map[int]*floorArenaRoom
}

// startFloor listens on addr and serves the floor on a thread of its own.
func startFloor(addr string, _ *slog.Logger) (*Running, error) {
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	f := &floor{base: time.Now(), rbuf: make([]byte, floorReadBuf), rec: newTickRecorder(),
		bc: map[int]*floorBCRoom{}, arenas: map[int]*floorArenaRoom{}}
	if f.lfd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("floor: socket: %w", err)
	}
	fail := func(what string, err error) (*Running, error) {
		f.closeFds()
		return nil, fmt.Errorf("floor: %s: %w", what, err)
	}
	_ = unix.SetsockoptInt(f.lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	sa := &unix.SockaddrInet4{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To4())
	if err := unix.Bind(f.lfd, sa); err != nil {
		return fail("bind", err)
	}
	if err := unix.Listen(f.lfd, 4096); err != nil {
		return fail("listen", err)
	}
	got, err := unix.Getsockname(f.lfd)
	if err != nil {
		return fail("getsockname", err)
	}
	port := got.(*unix.SockaddrInet4).Port
	if f.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fail("epoll_create1", err)
	}
	if f.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fail("eventfd", err)
	}
	for _, fd := range []int{f.lfd, f.efd} {
		if err := unix.EpollCtl(f.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return fail("epoll_ctl", err)
		}
	}
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // the one thread; never unlocked, so it exits with the loop
		defer close(done)
		f.loop()
	}()
	return &Running{addr: net.JoinHostPort(ta.IP.String(), strconv.Itoa(port)), close: func() error {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(f.efd, one[:])
		<-done
		return nil
	}}, nil
}

func (f *floor) closeFds() {
	for _, fd := range []int{f.lfd, f.epfd, f.efd} {
		if fd > 0 {
			unix.Close(fd)
		}
	}
}

func (f *floor) mono(t time.Time) int64 { return int64(t.Sub(f.base)) }

// loop runs until the eventfd is written.
func (f *floor) loop() {
	defer func() {
		for _, c := range f.conns {
			if c != nil {
				unix.Close(c.fd)
			}
		}
		f.closeFds()
	}()
	events := make([]unix.EpollEvent, floorEvents)
	for {
		f.now = time.Now()
		f.runTimers()
		wait := int64(-1)
		if len(f.timers) > 0 {
			wait = max(max(f.timers[0].at, f.lastTimers+floorSlack)-f.mono(time.Now()), 0)
		}
		n, err := f.wait(events, wait)
		if err != nil && err != unix.EINTR {
			panic("floor: epoll_wait: " + err.Error())
		}
		f.now = time.Now()
		for _, ev := range events[:max(n, 0)] {
			switch fd := int(ev.Fd); fd {
			case f.efd:
				return
			case f.lfd:
				f.accept()
			default:
				c := f.conns[fd]
				if c == nil || c.dead {
					continue
				}
				if ev.Events&unix.EPOLLOUT != 0 {
					f.flush(c)
				}
				if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR|unix.EPOLLRDHUP) != 0 && !c.dead {
					f.read(c)
				}
			}
		}
		f.closeMarked()
	}
}

// wait is epoll_pwait2 with a timeout of ns nanoseconds (negative: none), or epoll_wait
// with it rounded up to milliseconds where the kernel has no epoll_pwait2.
func (f *floor) wait(events []unix.EpollEvent, ns int64) (int, error) {
	if !f.noPwait2 {
		var ts *unix.Timespec
		if ns >= 0 {
			t := unix.NsecToTimespec(ns)
			ts = &t
		}
		r, _, e := unix.Syscall6(unix.SYS_EPOLL_PWAIT2, uintptr(f.epfd), uintptr(unsafe.Pointer(&events[0])),
			uintptr(len(events)), uintptr(unsafe.Pointer(ts)), 0, 0)
		if e != unix.ENOSYS {
			if e != 0 {
				return 0, e
			}
			return int(r), nil
		}
		f.noPwait2 = true
	}
	ms := -1
	if ns >= 0 {
		ms = int((ns + int64(time.Millisecond) - 1) / int64(time.Millisecond))
	}
	return unix.EpollWait(f.epfd, events, ms)
}

func (f *floor) accept() {
	for {
		fd, _, err := unix.Accept4(f.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN, or a full file table: the rest wait in the backlog
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		if err := unix.EpollCtl(f.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}); err != nil {
			unix.Close(fd)
			continue
		}
		for fd >= len(f.conns) {
			f.conns = append(f.conns, make([]*floorConn, len(f.conns)+64)...)
		}
		f.conns[fd] = &floorConn{fd: fd}
	}
}

// rawRead and rawWrite are read(2) and write(2) on non-blocking sockets: they never
// block, so they skip the runtime's system call bookkeeping.
func rawRead(fd int, p []byte) (int, unix.Errno) {
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(r), e
}

func rawWrite(fd int, p []byte) (int, unix.Errno) {
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(r), e
}

// read does one read(2) and handles every whole request or frame it completes.
func (f *floor) read(c *floorConn) {
	k := copy(f.rbuf, c.rest)
	if k == len(f.rbuf) { // cannot happen: rest is bounded below the buffer
		f.markClose(c)
		return
	}
	n, e := rawRead(c.fd, f.rbuf[k:])
	if e == unix.EAGAIN || e == unix.EINTR {
		return
	}
	if e != 0 || n == 0 {
		f.markClose(c)
		return
	}
	b := f.rbuf[:k+n]
	used := f.handle(c, b)
	if c.dead {
		return
	}
	if left := b[used:]; len(left) > 0 {
		c.rest = append(c.rest[:0], left...)
	} else {
		c.rest = c.rest[:0]
	}
}

// handle consumes whole requests or frames from b and returns how many bytes it used.
func (f *floor) handle(c *floorConn, b []byte) int {
	used := 0
	for !c.dead && !c.closing && used < len(b) {
		var n int
		if c.kind == floorHTTP {
			n = f.request(c, b[used:])
		} else {
			n = f.frame(c, b[used:])
		}
		if n == 0 {
			break
		}
		used += n
	}
	return used
}

// send writes p to c: at once if nothing waits, else after what waits. It never blocks;
// past floorMaxPending waiting bytes c is closed as a slow consumer. It reports whether
// c is still open.
func (f *floor) send(c *floorConn, p []byte) bool {
	if c.dead {
		return false
	}
	if len(c.out) == 0 {
		n, e := rawWrite(c.fd, p)
		switch {
		case e == 0 && n == len(p):
			return true
		case e != 0 && e != unix.EAGAIN && e != unix.EINTR:
			f.markClose(c)
			return false
		}
		if e != 0 {
			n = 0
		}
		p = p[n:]
		_ = unix.EpollCtl(f.epfd, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLOUT, Fd: int32(c.fd)})
	}
	if len(c.out)+len(p) > floorMaxPending {
		if c.kind == floorWSBroadcast {
			f.bcStats.SlowClosed++
		}
		c.out = c.out[:0]
		var cl [4]byte
		cl[0], cl[1] = 0x88, 2
		binary.BigEndian.PutUint16(cl[2:], 1008)
		_, _ = rawWrite(c.fd, cl[:]) // best effort: the socket is full
		f.markClose(c)
		return false
	}
	c.out = append(c.out, p...)
	return true
}

// flush writes what waits for c (EPOLLOUT).
func (f *floor) flush(c *floorConn) {
	if len(c.out) > 0 {
		n, e := rawWrite(c.fd, c.out)
		if e != 0 && e != unix.EAGAIN && e != unix.EINTR {
			f.markClose(c)
			return
		}
		if e == 0 {
			c.out = c.out[:copy(c.out, c.out[n:])]
		}
	}
	if len(c.out) == 0 {
		if c.closing {
			f.markClose(c)
			return
		}
		_ = unix.EpollCtl(f.epfd, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(c.fd)})
	}
}

// finish closes c once what waits is written (at once if nothing does).
func (f *floor) finish(c *floorConn) {
	c.closing = true
	if len(c.out) == 0 {
		f.markClose(c)
	}
}

// markClose marks c dead (nothing more is sent to it or read from it); closeMarked
// takes it out of its room and closes its socket after the tick or the turn, so that a
// broadcast in progress never sees its room's list change.
func (f *floor) markClose(c *floorConn) {
	if c.dead {
		return
	}
	c.dead = true
	f.toClose = append(f.toClose, c)
}

func (f *floor) closeMarked() {
	for i, c := range f.toClose {
		f.leave(c)
		unix.Close(c.fd) // also leaves the epoll set
		f.conns[c.fd] = nil
		f.toClose[i] = nil
	}
	f.toClose = f.toClose[:0]
}

// leave takes a closed connection out of its room.
func (f *floor) leave(c *floorConn) {
	switch c.kind {
	case floorWSBroadcast:
		if r := f.bc[c.bcRoom]; r != nil {
			last := len(r.members) - 1
			r.members[c.bcIdx] = r.members[last]
			r.members[c.bcIdx].bcIdx = c.bcIdx
			r.members[last] = nil
			r.members = r.members[:last]
		}
		f.bcStats.Conns--
	case floorWSArena:
		if r := c.ar; r != nil && r.conns[c.slot] == c {
			r.conns[c.slot] = nil
			if r.n--; r.n == 0 {
				r.t.dead = true
				delete(f.arenas, r.id)
			}
		}
	}
}

// --- HTTP ---

// request handles one whole request at the start of b and returns its length, or 0
// if b does not hold a whole one yet.
func (f *floor) request(c *floorConn, b []byte) int {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end > floorMaxHeader || (end < 0 && len(b) > floorMaxHeader) {
		f.reply(c, 431, "text/plain; charset=utf-8", "request head too large\n", true)
		return 0
	}
	if end < 0 {
		return 0
	}
	head := b[:end]
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	method, line, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(line, []byte(" "))
	if !ok1 || !ok2 || !bytes.HasPrefix(proto, []byte("HTTP/1.")) {
		f.reply(c, 400, "text/plain; charset=utf-8", "bad request line\n", true)
		return end + 4
	}
	var (
		length       int
		wsKey        []byte
		upgrade      bool
		closeAfter   = bytes.Equal(proto, []byte("HTTP/1.0"))
		chunked, bad bool
	)
	for len(rest) > 0 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, val, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			bad = true
			break
		}
		val = bytes.TrimSpace(val)
		switch {
		case asciiEqualFold(name, "content-length"):
			n, err := strconv.Atoi(string(val))
			if err != nil || n < 0 {
				bad = true
			}
			length = n
		case asciiEqualFold(name, "transfer-encoding"):
			chunked = true
		case asciiEqualFold(name, "connection"):
			if asciiContainsFold(val, "close") {
				closeAfter = true
			}
		case asciiEqualFold(name, "upgrade"):
			upgrade = asciiContainsFold(val, "websocket")
		case asciiEqualFold(name, "sec-websocket-key"):
			wsKey = val
		}
	}
	switch {
	case bad:
		f.reply(c, 400, "text/plain; charset=utf-8", "bad header\n", true)
		return end + 4
	case chunked:
		f.reply(c, 501, "text/plain; charset=utf-8", "chunked bodies are not served\n", true)
		return end + 4
	case length > floorMaxBody:
		f.reply(c, 413, "text/plain; charset=utf-8", "body too large\n", true)
		return end + 4
	}
	total := end + 4 + length
	if len(b) < total {
		return 0
	}
	body := b[end+4 : total]
	path, query, _ := bytes.Cut(target, []byte("?"))
	f.route(c, string(method), path, query, body, upgrade, wsKey, closeAfter)
	return total
}

// route dispatches a request. Strings made here are off the hot paths (setup, stats)
// except the input's, which makes none.
func (f *floor) route(c *floorConn, method string, path, query, body []byte, upgrade bool, wsKey []byte, closeAfter bool) {
	const text = "text/plain; charset=utf-8"
	switch {
	case method == "POST" && bytes.HasPrefix(path, []byte("/rooms/")) && bytes.HasSuffix(path, []byte("/input")):
		f.roomInput(c, path[len("/rooms/"):len(path)-len("/input")], body, closeAfter)
	case method == "POST" && string(path) == "/rooms/setup":
		f.roomsSetup(c, body, closeAfter)
	case method == "POST" && string(path) == "/rooms/reset":
		f.rec.reset()
		f.reply(c, 200, text, "ok", closeAfter)
	case method == "GET" && string(path) == "/rooms/stats":
		f.replyJSON(c, f.rec.stats(f.roomSetup.Rooms, f.roomSetup.HeavyIters > 0), closeAfter)
	case method == "GET" && bytes.HasPrefix(path, []byte("/ws/")) && string(path) != "/ws/stats":
		idx := wsRoomIndex(string(path[len("/ws/"):]))
		if idx < 0 {
			f.reply(c, 404, text, "unknown room\n", closeAfter)
			return
		}
		if f.upgrade(c, upgrade, wsKey) {
			c.kind, c.bcRoom = floorWSBroadcast, idx
			r := f.bc[idx]
			if r == nil {
				r = &floorBCRoom{}
				f.bc[idx] = r
			}
			c.bcIdx = len(r.members)
			r.members = append(r.members, c)
			f.bcStats.Conns++
		}
	case method == "POST" && string(path) == "/ws/start":
		f.wsStart(c, body, closeAfter)
	case method == "GET" && string(path) == "/ws/stats":
		f.replyJSON(c, f.bcStats, closeAfter)
	case method == "GET" && string(path) == ArenaPath:
		f.arenaJoin(c, query, upgrade, wsKey, closeAfter)
	case method == "GET" && string(path) == "/":
		f.reply(c, 200, text, "floor\n", closeAfter)
	default:
		f.reply(c, 404, text, "not found\n", closeAfter)
	}
}

var statusText = map[int]string{200: "OK", 400: "Bad Request", 404: "Not Found", 409: "Conflict", 413: "Content Too Large",
	426: "Upgrade Required", 429: "Too Many Requests", 431: "Request Header Fields Too Large", 501: "Not Implemented"}

// reply writes a whole response in one write(2).
func (f *floor) reply(c *floorConn, status int, ctype, body string, closeAfter bool) {
	b := append(f.wbuf[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, statusText[status]...)
	b = append(b, "\r\nContent-Type: "...)
	b = append(b, ctype...)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	if status == 429 {
		b = append(b, "\r\nRetry-After: 1"...)
	}
	if closeAfter {
		b = append(b, "\r\nConnection: close"...)
	}
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	f.wbuf = b
	if f.send(c, b) && closeAfter {
		f.finish(c)
	}
}

func (f *floor) replyJSON(c *floorConn, v any, closeAfter bool) {
	b, err := json.Marshal(v)
	if err != nil {
		f.reply(c, 500, "text/plain; charset=utf-8", err.Error()+"\n", true)
		return
	}
	f.reply(c, 200, "application/json", string(b)+"\n", closeAfter)
}

// upgrade answers the WebSocket handshake (101), or 426/400 when it is not one.
func (f *floor) upgrade(c *floorConn, upgrade bool, key []byte) bool {
	if !upgrade {
		f.reply(c, 426, "text/plain; charset=utf-8", "WebSocket upgrade required\n", true)
		return false
	}
	if len(key) == 0 {
		f.reply(c, 400, "text/plain; charset=utf-8", "missing Sec-WebSocket-Key\n", true)
		return false
	}
	h := sha1.New()
	h.Write(key)
	h.Write([]byte(wsGUID))
	var sum [sha1.Size]byte
	b := append(f.wbuf[:0], "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	b = base64.StdEncoding.AppendEncode(b, h.Sum(sum[:0]))
	b = append(b, "\r\n\r\n"...)
	f.wbuf = b
	return f.send(c, b)
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

func asciiContainsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if asciiEqualFold(b[i:i+len(s)], s) {
			return true
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// --- WebSocket frames ---

// frame handles one whole client frame at the start of b and returns its length, or 0
// if b does not hold a whole one yet.
func (f *floor) frame(c *floorConn, b []byte) int {
	if len(b) < 2 {
		return 0
	}
	fin, op, masked := b[0]&0x80 != 0, b[0]&0x0F, b[1]&0x80 != 0
	n, hl := uint64(b[1]&0x7F), 2
	switch n {
	case 126:
		if len(b) < 4 {
			return 0
		}
		n, hl = uint64(binary.BigEndian.Uint16(b[2:])), 4
	case 127:
		if len(b) < 10 {
			return 0
		}
		n, hl = binary.BigEndian.Uint64(b[2:]), 10
	}
	switch {
	case !masked || !fin || op == 0 || b[0]&0x70 != 0 || (op >= 0x8 && n > 125):
		f.closeWS(c, 1002) // unmasked, fragmented, reserved bits, long control: not from our clients
		return 0
	case n > floorMaxFrame:
		f.closeWS(c, 1009)
		return 0
	}
	total := hl + 4 + int(n)
	if len(b) < total {
		return 0
	}
	mask := b[hl : hl+4]
	p := b[hl+4 : total]
	for i := range p {
		p[i] ^= mask[i&3]
	}
	switch op {
	case 0x1, 0x2:
		if c.kind == floorWSArena && c.ar != nil {
			if in, ok := arena.ParseInput(p); ok {
				in.Slot = c.slot
				c.ar.sim.Apply(in)
			}
		}
	case 0x8: // close: echo the code and end
		code := uint16(1000)
		if len(p) >= 2 {
			code = binary.BigEndian.Uint16(p)
		}
		f.closeWS(c, code)
	case 0x9: // ping: pong with the same payload
		var pong [2 + 125]byte
		pong[0], pong[1] = 0x8A, byte(len(p))
		f.send(c, pong[:2+copy(pong[2:], p)])
	case 0xA:
	default:
		f.closeWS(c, 1002)
	}
	return total
}

// closeWS sends a close frame with code and closes c once it is written.
func (f *floor) closeWS(c *floorConn, code uint16) {
	var cl [4]byte
	cl[0], cl[1] = 0x88, 2
	binary.BigEndian.PutUint16(cl[2:], code)
	if f.send(c, cl[:]) {
		f.finish(c)
	}
}

// --- timers ---

func (f *floor) addTimer(t *floorTimer) {
	f.timers = append(f.timers, t)
	f.up(len(f.timers) - 1)
}

// runTimers runs every tick whose deadline has passed, in deadline order. A timer
// whose next deadlines passed meanwhile skips them (as baton's rooms do by default).
func (f *floor) runTimers() {
	now := f.mono(f.now)
	if len(f.timers) > 0 && f.timers[0].at <= now {
		f.lastTimers = now
	}
	for len(f.timers) > 0 && f.timers[0].at <= now {
		t := f.timers[0]
		if t.dead {
			f.pop()
			continue
		}
		t.run(time.Now(), t.at)
		t.at += t.period
		t.n++
		if late := f.mono(time.Now()) - t.at; late >= 0 { // skip what passed (the next run sees the gap in n)
			k := late/t.period + 1
			t.at += k * t.period
			t.n += uint64(k)
		}
		f.down(0)
		f.closeMarked()
	}
}

func (f *floor) pop() {
	last := len(f.timers) - 1
	f.timers[0] = f.timers[last]
	f.timers[last] = nil
	f.timers = f.timers[:last]
	if last > 0 {
		f.down(0)
	}
}

func (f *floor) up(i int) {
	h := f.timers
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= h[i].at {
			return
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
}

func (f *floor) down(i int) {
	h := f.timers
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].at < h[l].at {
			m = r
		}
		if h[i].at <= h[m].at {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// --- rooms scenario ---

func (f *floor) roomsSetup(c *floorConn, body []byte, closeAfter bool) {
	const text = "text/plain; charset=utf-8"
	var s RoomSetup
	if err := json.Unmarshal(body, &s); err != nil {
		f.reply(c, 400, text, "bad setup: "+err.Error()+"\n", closeAfter)
		return
	}
	if err := s.Validate(); err != nil {
		f.reply(c, 400, text, err.Error()+"\n", closeAfter)
		return
	}
	if f.rooms != nil {
		f.reply(c, 409, text, "rooms already set up\n", closeAfter)
		return
	}
	f.roomSetup, f.rooms = s, make(map[string]*floorRoom, s.Rooms+1)
	f.rec.setup(s)
	n := s.Rooms
	if s.HeavyIters > 0 {
		n++
	}
	began := f.mono(time.Now())
	for i := range n {
		name, heavy := roomName(i), false
		if i == s.Rooms {
			name, heavy = HeavyRoomName, true
		}
		r := &floorRoom{heavy: heavy, state: NewRoomState(uint64(i)), inputs: make([]Input, 0, RoomInputQueue)}
		f.rooms[name] = r
		var lastN uint64
		var t *floorTimer
		t = &floorTimer{at: began + int64(RoomPeriod+stagger(i, n)), period: int64(RoomPeriod), n: 1,
			run: func(now time.Time, deadline int64) {
				late := time.Duration(f.mono(now) - deadline)
				applied := len(r.inputs)
				for _, in := range r.inputs {
					r.state.Apply(in)
				}
				r.inputs = r.inputs[:0]
				r.state.SimStep(f.rec.iters(r.heavy))
				var skipped uint64
				if lastN > 0 && t.n > lastN+1 {
					skipped = t.n - lastN - 1
				}
				lastN = t.n
				f.rec.tick(r.heavy, max(late, 0), time.Since(now), skipped, applied)
			}}
		f.addTimer(t)
	}
	f.rec.reset()
	f.reply(c, 200, text, "ok", closeAfter)
}

func (f *floor) roomInput(c *floorConn, id, body []byte, closeAfter bool) {
	const text = "text/plain; charset=utf-8"
	in, ok := ParseInput(body)
	if !ok {
		f.reply(c, 400, text, "bad input\n", closeAfter)
		return
	}
	r := f.rooms[string(id)] // no allocation: the compiler looks up with the bytes
	if r == nil {
		f.reply(c, 404, text, "unknown room\n", closeAfter)
		return
	}
	full := len(r.inputs) >= RoomInputQueue
	if !full {
		r.inputs = append(r.inputs, in)
	}
	f.rec.input(!full)
	if full {
		f.reply(c, 429, text, "busy\n", closeAfter)
		return
	}
	f.reply(c, 200, text, "ok", closeAfter)
}

// --- ws-broadcast ---

func (f *floor) wsStart(c *floorConn, body []byte, closeAfter bool) {
	const text = "text/plain; charset=utf-8"
	var s WSStart
	if err := json.Unmarshal(body, &s); err != nil {
		f.reply(c, 400, text, "bad start: "+err.Error()+"\n", closeAfter)
		return
	}
	if err := s.Validate(); err != nil {
		f.reply(c, 400, text, err.Error()+"\n", closeAfter)
		return
	}
	if f.bcStarted {
		f.reply(c, 409, text, "already started\n", closeAfter)
		return
	}
	f.bcStarted = true
	began := f.mono(time.Now())
	for i := range s.Rooms {
		r := f.bc[i]
		if r == nil {
			r = &floorBCRoom{}
			f.bc[i] = r
		}
		r.frame[0], r.frame[1] = 0x82, 126
		binary.BigEndian.PutUint16(r.frame[2:], WSPayload)
		// staggered over one period, each first sent one period after its start, as
		// the baseline's tickers are
		f.addTimer(&floorTimer{at: began + int64(stagger(i, s.Rooms)+WSPeriod), period: int64(WSPeriod), n: 1,
			run: func(time.Time, int64) {
				r.seq++
				wsMessage(r.frame[4:], i, r.seq)
				sent := 0
				for _, m := range r.members {
					if f.send(m, r.frame[:]) {
						sent++
					}
				}
				f.bcStats.Broadcasts++
				f.bcStats.Sent += uint64(sent)
			}})
	}
	f.reply(c, 200, text, "ok", closeAfter)
}

// --- arena ---

func (f *floor) arenaJoin(c *floorConn, query []byte, upgrade bool, key []byte, closeAfter bool) {
	id, slot, ok := ParseArenaQuery(string(query))
	if !ok {
		f.reply(c, 400, "text/plain; charset=utf-8", "bad room or slot\n", closeAfter)
		return
	}
	if !f.upgrade(c, upgrade, key) {
		return
	}
	r := f.arenas[id]
	if r == nil {
		r = &floorArenaRoom{id: id, sim: arena.NewSim(uint32(id))}
		r.frame[0], r.frame[1] = 0x82, arena.StateSize
		r.t = &floorTimer{at: f.mono(time.Now()) + int64(arena.Period), period: int64(arena.Period), n: 1,
			run: func(now time.Time, _ int64) {
				r.sim.Step()
				r.sim.Encode(r.frame[2:], now)
				for _, m := range r.conns {
					if m != nil {
						f.send(m, r.frame[:])
					}
				}
			}}
		f.addTimer(r.t)
		f.arenas[id] = r
	}
	c.kind, c.ar, c.slot = floorWSArena, r, slot
	if old := r.conns[slot]; old != nil {
		old.ar = nil // leaves without touching the room
		f.closeWS(old, 1000)
	} else {
		r.n++
	}
	r.conns[slot] = c
}
