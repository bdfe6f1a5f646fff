//go:build linux

package arenaload

import (
	"bufio"
	"container/heap"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonrt/baton/bench/arena"
)

const (
	opCont   = 0x0
	opBinary = 0x2
	opClose  = 0x8
	opPing   = 0x9
	opPong   = 0xA
)

const (
	phaseSetup = iota
	phaseWarm
	phaseMeasure
	phaseDone
)

// player is one WebSocket player. After adopt it belongs to the loop goroutine.
type player struct {
	room, slot int
	conn       net.Conn      // during the setup; then fd
	br         *bufio.Reader // the handshake's reader (may hold bytes past it)
	fd         int

	seq  uint32
	next int64     // mono ns of the next send
	sent [64]int64 // mono ns of sending input #seq, at seq % 64
	wbuf []byte

	rbuf       []byte
	start, end int

	resolved uint32 // the highest input acknowledged so far
	lastRecv int64
	err      error
	errPhase int
}

// lg is one run's loop state: confined to the loop goroutine.
type lg struct {
	phase int
	base  time.Time
	rnd   uint64
	res   *Result
}

func (l *lg) mono(t time.Time) int64 { return int64(t.Sub(l.base)) }

// rand32 is a xorshift for masks and jitter (nothing secret).
func (l *lg) rand32() uint32 {
	x := l.rnd
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	l.rnd = x
	return uint32(x >> 32)
}

func run(ctx context.Context, cfg Config) (*Result, error) {
	players := cfg.Rooms * arena.Players
	res := &Result{Players: players, Gap: newHist(), Lat: newHist(), Deliv: newHist(), Errors: map[string]uint64{}}
	errs := &errorSet{m: res.Errors}
	ps := make([]*player, players)
	for i := range ps {
		ps[i] = &player{room: i / arena.Players, slot: i % arena.Players, fd: -1}
	}
	l := &lg{base: time.Now(), rnd: uint64(time.Now().UnixNano()) | 1, res: res}
	joined := make(chan *player, players)
	setupCtx, cancelSetup := context.WithTimeout(ctx, cfg.SetupTimeout)
	defer cancelSetup()

	type loopResult struct {
		ws, we time.Time
		err    error
	}
	done := make(chan loopResult, 1)
	go func() {
		runtime.LockOSThread()
		var lr loopResult
		lr.err = l.loop(ctx, cfg, joined, &lr.ws, &lr.we)
		done <- lr
	}()

	t0 := time.Now()
	sem := make(chan struct{}, cfg.Conc)
	var wg sync.WaitGroup
	var connected atomic.Int64
	for r := range cfg.Rooms {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, p := range ps[r*arena.Players : (r+1)*arena.Players] {
				c, br, err := dial(setupCtx, cfg.Addr, cfg.Path(p.room, p.slot))
				if err != nil {
					errs.add("join: " + errKind(err))
					continue
				}
				p.conn, p.br = c, br
				if err := p.adopt(); err != nil {
					errs.add("adopt: " + errKind(err))
					c.Close()
					continue
				}
				connected.Add(1)
				joined <- p
			}
		}()
	}
	wg.Wait()
	close(joined)
	res.Setup = time.Since(t0)
	res.Connected = int(connected.Load())
	lr := <-done
	for _, p := range ps { // the loop closed them; the figures are ours now
		if p.err != nil && p.errPhase < phaseDone {
			res.Errors["conn: "+errKind(p.err)]++
		}
	}
	if lr.err != nil {
		return res, lr.err
	}
	res.Window = lr.we.Sub(lr.ws)
	res.Expected = float64(players) * res.Window.Seconds() * float64(time.Second/arena.Period)
	return res, nil
}

// dial connects to addr and upgrades at path, checking Sec-WebSocket-Accept.
func dial(ctx context.Context, addr, path string) (net.Conn, *bufio.Reader, error) {
	d := net.Dialer{Timeout: 20 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	dl := time.Now().Add(20 * time.Second)
	if t, ok := ctx.Deadline(); ok && t.Before(dl) {
		dl = t
	}
	_ = c.SetDeadline(dl)
	var key [16]byte
	_, _ = rand.Read(key[:])
	k := base64.StdEncoding.EncodeToString(key[:])
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + k + "\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return nil, nil, err
	}
	br := bufio.NewReaderSize(c, 4096)
	status, err := br.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("upgrade: %w", err)
	}
	if !strings.HasPrefix(status, "HTTP/1.1 101") {
		c.Close()
		return nil, nil, fmt.Errorf("upgrade: %s", strings.TrimSpace(status))
	}
	h := sha1.Sum([]byte(k + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	want := base64.StdEncoding.EncodeToString(h[:])
	accepted := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("upgrade headers: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		if name, val, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Sec-WebSocket-Accept") {
			accepted = strings.TrimSpace(val) == want
		}
	}
	if !accepted {
		c.Close()
		return nil, nil, errors.New("upgrade: bad Sec-WebSocket-Accept")
	}
	_ = c.SetDeadline(time.Time{})
	return c, br, nil
}

// adopt moves the connection's socket out of Go's netpoller into fd (a dup sharing the
// open file, so still non-blocking) and keeps the bytes the handshake read past.
func (p *player) adopt() error {
	tc, ok := p.conn.(*net.TCPConn)
	if !ok {
		return errors.New("not a TCP connection")
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var dupErr error
	if err := raw.Control(func(fd uintptr) { p.fd, dupErr = syscall.Dup(int(fd)) }); err != nil {
		return err
	}
	if dupErr != nil {
		p.fd = -1
		return dupErr
	}
	if err := syscall.SetNonblock(p.fd, true); err != nil {
		syscall.Close(p.fd)
		p.fd = -1
		return err
	}
	p.rbuf = make([]byte, 8192)
	if n := p.br.Buffered(); n > 0 {
		b, _ := p.br.Peek(n)
		p.end = copy(p.rbuf, b)
	}
	tc.Close() // the netpoller lets go of it; p.fd stays open
	p.conn, p.br = nil, nil
	return nil
}

// loop drives the players from their join until the window ends, marking the window in
// ws and we.
func (l *lg) loop(ctx context.Context, cfg Config, joined <-chan *player, ws, we *time.Time) error {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	defer syscall.Close(epfd)
	var live []*player
	defer func() {
		for _, p := range live {
			p.closeFd(l, nil)
		}
		if joined != nil { // a failed loop still owns the players that keep joining
			for p := range joined {
				p.closeFd(l, nil)
			}
		}
	}()
	h := sendHeap{}
	events := make([]syscall.EpollEvent, 256)
	period := int64(time.Duration(float64(time.Second) / cfg.InputHz))
	jit := period / 10
	l.phase = phaseSetup
	var warmEnd, end int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := time.Now()
		m := l.mono(now)
		for joined != nil { // take the players who joined since the last turn
			var p *player
			got, ok := false, false
			select {
			case p, ok = <-joined:
				got = true
			default:
			}
			if !got {
				break
			}
			if !ok {
				joined = nil
				l.phase = phaseWarm
				warmEnd = m + int64(cfg.Warmup)
				end = warmEnd + int64(cfg.Duration)
				break
			}
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(len(live))}
			if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.fd, &ev); err != nil {
				p.closeFd(l, err)
				return err
			}
			live = append(live, p)
			p.parse(l, now) // bytes the handshake read ahead
			p.next = m + int64(l.rand32())%period
			heap.Push(&h, p)
		}
		if l.phase == phaseWarm && m >= warmEnd {
			*ws = time.Now()
			if cfg.OnWindow != nil {
				cfg.OnWindow(true)
			}
			l.phase = phaseMeasure
		}
		if l.phase == phaseMeasure && m >= end {
			l.phase = phaseDone
			if cfg.OnWindow != nil {
				cfg.OnWindow(false)
			}
			*we = time.Now()
			return nil
		}
		for len(h) > 0 && h[0].next <= m {
			p := h[0]
			if p.send(l, now) && l.phase == phaseMeasure {
				l.res.InputsSent++
			}
			if p.fd >= 0 {
				p.next += period + int64(l.rand32())%(2*jit+1) - jit
				heap.Fix(&h, 0)
			} else {
				heap.Pop(&h)
			}
		}
		var wake int64
		switch l.phase {
		case phaseSetup:
			wake = m + int64(2*time.Millisecond) // look for new players
		case phaseWarm:
			wake = warmEnd
		default:
			wake = end
		}
		wake = min(wake, m+int64(100*time.Millisecond)) // look at ctx now and then
		if len(h) > 0 {
			wake = min(wake, h[0].next)
		}
		ms := int((wake - l.mono(time.Now()) + int64(time.Millisecond) - 1) / int64(time.Millisecond))
		n, err := syscall.EpollWait(epfd, events, max(ms, 0))
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return err
		}
		now = time.Now() // one clock reading per wake-up: what arrived together
		for _, ev := range events[:n] {
			if p := live[ev.Fd]; p.fd >= 0 {
				p.readOnce(l, now)
			}
		}
	}
}

// send writes the player's next input; false if the socket failed (the player is out).
func (p *player) send(l *lg, now time.Time) bool {
	p.seq++
	in := arena.Input{Seq: p.seq, DX: float32(int32(l.rand32()%3) - 1), DY: float32(int32(l.rand32()%3) - 1)}
	var b [arena.InputSize]byte
	p.sent[p.seq%uint32(len(p.sent))] = l.mono(now)
	return p.writeFrame(l, opBinary, arena.AppendInput(b[:0], in))
}

// writeFrame writes one masked frame (payload under 126 bytes) in one write(2).
func (p *player) writeFrame(l *lg, op byte, pl []byte) bool {
	b := append(p.wbuf[:0], 0x80|op, 0x80|byte(len(pl)))
	var mask [4]byte
	binary.LittleEndian.PutUint32(mask[:], l.rand32())
	b = append(b, mask[:]...)
	off := len(b)
	b = append(b, pl...)
	for i := range pl {
		b[off+i] ^= mask[i&3]
	}
	p.wbuf = b
	n, err := syscall.Write(p.fd, b)
	if err != nil || n != len(b) {
		if err == nil || err == syscall.EAGAIN {
			err = errors.New("send buffer full")
		}
		p.closeFd(l, fmt.Errorf("write: %w", err))
		return false
	}
	return true
}

// readOnce reads what the socket holds (one read(2)) and handles every whole frame.
func (p *player) readOnce(l *lg, now time.Time) {
	if p.end == len(p.rbuf) { // a frame larger than the buffer: grow
		p.rbuf = append(p.rbuf, make([]byte, len(p.rbuf))...)
	}
	n, err := syscall.Read(p.fd, p.rbuf[p.end:])
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return
	}
	if err != nil {
		p.closeFd(l, fmt.Errorf("read: %w", err))
		return
	}
	if n == 0 {
		p.closeFd(l, errors.New("eof"))
		return
	}
	p.end += n
	p.parse(l, now)
}

// parse handles the whole frames in rbuf[start:end] and keeps the rest.
func (p *player) parse(l *lg, now time.Time) {
frames:
	for p.fd >= 0 {
		b := p.rbuf[p.start:p.end]
		if len(b) < 2 {
			break
		}
		fin, op := b[0]&0x80 != 0, b[0]&0x0F
		n, hl := uint64(b[1]&0x7F), 2
		switch n {
		case 126:
			if len(b) < 4 {
				break frames
			}
			n, hl = uint64(binary.BigEndian.Uint16(b[2:])), 4
		case 127:
			if len(b) < 10 {
				break frames
			}
			n, hl = binary.BigEndian.Uint64(b[2:]), 10
		}
		if b[1]&0x80 != 0 || n > 1<<20 || !fin || op == opCont {
			// masked, huge, or fragmented: none of the servers sends those
			p.closeFd(l, errors.New("bad frame from the server"))
			return
		}
		if uint64(len(b)-hl) < n {
			break frames
		}
		pl := b[hl : hl+int(n)]
		p.start += hl + int(n)
		switch op {
		case opPing:
			p.writeFrame(l, opPong, pl)
		case opClose:
			code := 1005
			if len(pl) >= 2 {
				code = int(binary.BigEndian.Uint16(pl))
			}
			p.closeFd(l, fmt.Errorf("%w %d", errClosed, code))
			return
		case opPong:
		default:
			p.message(l, now, op, pl)
		}
	}
	if p.start == p.end {
		p.start, p.end = 0, 0
	} else if p.start > len(p.rbuf)/2 {
		p.end = copy(p.rbuf, p.rbuf[p.start:p.end])
		p.start = 0
	}
}

// message handles one whole data message from the server: a state.
func (p *player) message(l *lg, now time.Time, op byte, pl []byte) {
	st, ok := arena.ParseState(pl)
	if op != opBinary || !ok || !checkState(pl) || st.Room != uint32(p.room) {
		if l.phase == phaseMeasure {
			l.res.Undecoded++
		}
		return
	}
	m := l.mono(now)
	if l.phase == phaseMeasure {
		l.res.States++
		if p.lastRecv != 0 {
			record(l.res.Gap, m-p.lastRecv)
		}
		record(l.res.Deliv, now.UnixNano()-st.Stamp)
	}
	p.lastRecv = m
	if ack := st.Ack[p.slot]; ack > p.resolved {
		for s := p.resolved + 1; s <= ack; s++ {
			if ack-s >= uint32(len(p.sent)) {
				continue
			}
			if t := p.sent[s%uint32(len(p.sent))]; t != 0 && l.phase == phaseMeasure {
				record(l.res.Lat, m-t)
			}
		}
		p.resolved = ack
	}
}

func (p *player) closeFd(l *lg, err error) {
	if p.fd < 0 {
		return
	}
	syscall.Close(p.fd) // also leaves the epoll set
	p.fd = -1
	if err != nil && p.err == nil {
		p.err, p.errPhase = err, l.phase
	}
}

type sendHeap []*player

func (h sendHeap) Len() int           { return len(h) }
func (h sendHeap) Less(i, j int) bool { return h[i].next < h[j].next }
func (h sendHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *sendHeap) Push(x any)        { *h = append(*h, x.(*player)) }
func (h *sendHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
