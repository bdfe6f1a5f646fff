// Package wsload is baton-bench's WebSocket push client: many connections that only
// receive, each on its own goroutine with a minimal RFC 6455 frame reader over a raw
// net.Conn, measuring the delivery latency of messages the server stamps with its send
// time. It is built to be cheap, because it shares a machine with the server it measures:
// no allocation per message, one buffered reader per connection, latencies in a few
// mutex-guarded histogram shards.
//
// # Payload
//
// A measured message is a binary (or text) message whose first 8 bytes are the server's
// send time as Unix nanoseconds, little endian (StampLen). Client and server on one
// machine read the same clock, so now - stamp is the delivery latency: queueing in the
// server, the write, the kernel and the client's wake-up.
package wsload

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/batonrt/baton/bench/loadgen"
)

// StampLen is the length of the send-time stamp that starts a measured message.
const StampLen = 8

// PutStamp writes t as the stamp at the start of p (len(p) >= StampLen).
func PutStamp(p []byte, t time.Time) { binary.LittleEndian.PutUint64(p, uint64(t.UnixNano())) }

// Error kinds of Result.Errors besides "close NNNN" (the server closed with that code).
const (
	ErrConnect  = "connect"  // dial or handshake failed
	ErrClosed   = "closed"   // the connection ended without a close frame
	ErrProtocol = "protocol" // a frame the reader does not accept (masked, oversized control)
)

// Config describes the connections.
type Config struct {
	// Addr is the server's "host:port" (loopback only); Host is sent as the Host header
	// (default Addr).
	Addr, Host string
	// Path returns the request path of connection i (e.g. "/ws/room-3").
	Path func(i int) string
	// Conns is the number of connections.
	Conns int
	// MaxDialing bounds the handshakes in progress (default 128).
	MaxDialing int
	// DialTimeout bounds each connect and handshake (default 5 s).
	DialTimeout time.Duration
}

// Validate reports the first invalid field of cfg. Any goroutine.
func (cfg Config) Validate() error {
	switch {
	case cfg.Conns <= 0:
		return fmt.Errorf("wsload: Config.Conns must be positive, got %d", cfg.Conns)
	case cfg.Path == nil:
		return errors.New("wsload: Config.Path is nil")
	case cfg.MaxDialing < 0:
		return fmt.Errorf("wsload: Config.MaxDialing must not be negative, got %d", cfg.MaxDialing)
	case cfg.DialTimeout < 0:
		return fmt.Errorf("wsload: Config.DialTimeout must not be negative, got %v", cfg.DialTimeout)
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return fmt.Errorf("wsload: Config.Addr: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("wsload: Config.Addr: %s is not a loopback address", cfg.Addr)
	}
	return nil
}

const (
	stateWarm int32 = iota
	stateMeasure
	stateDone
)

const shards = 16

type shard struct {
	mu        sync.Mutex
	lat       *hdrhistogram.Histogram
	delivered uint64
	errs      map[string]uint64
}

// Fleet is a set of connected WebSocket clients. Dial returns it connected; it records
// nothing until Measure, and Close ends it.
type Fleet struct {
	cfg    Config
	state  atomic.Int32
	shards [shards]shard
	conns  []net.Conn
	wg     sync.WaitGroup
	// Connected counts handshakes that succeeded; Received counts every message, in or
	// out of the window (for waiting until traffic flows).
	connected atomic.Int64
	received  atomic.Uint64
	start     time.Time
	end       time.Time
	mu        sync.Mutex
}

// Dial connects cfg.Conns clients and starts their readers. Connections that fail count as
// ErrConnect; Dial fails only if cfg is invalid or ctx ends. Any goroutine.
func Dial(ctx context.Context, cfg Config) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Host == "" {
		cfg.Host = cfg.Addr
	}
	if cfg.MaxDialing == 0 {
		cfg.MaxDialing = 128
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	f := &Fleet{cfg: cfg, conns: make([]net.Conn, cfg.Conns)}
	for i := range f.shards {
		f.shards[i].lat = loadgen.NewHistogram()
		f.shards[i].errs = map[string]uint64{}
	}
	sem := make(chan struct{}, cfg.MaxDialing)
	var dialing sync.WaitGroup
	for i := range cfg.Conns {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			dialing.Wait()
			f.Close()
			return nil, ctx.Err()
		}
		dialing.Add(1)
		go func() {
			defer dialing.Done()
			c, br, err := f.handshake(ctx, i)
			<-sem
			if err != nil {
				f.fail(i, ErrConnect)
				return
			}
			f.mu.Lock()
			f.conns[i] = c
			f.mu.Unlock()
			f.connected.Add(1)
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.read(i, c, br)
			}()
		}()
	}
	dialing.Wait()
	return f, ctx.Err()
}

// Connected returns the connections whose handshake succeeded. Any goroutine.
func (f *Fleet) Connected() int { return int(f.connected.Load()) }

// Received returns the messages received so far, in or out of the window. Any goroutine.
func (f *Fleet) Received() uint64 { return f.received.Load() }

// MeasureStart starts recording (the window opens). Any goroutine.
func (f *Fleet) MeasureStart() {
	f.mu.Lock()
	f.start = time.Now()
	f.mu.Unlock()
	f.state.Store(stateMeasure)
}

// MeasureEnd stops recording (the window closes). Any goroutine.
func (f *Fleet) MeasureEnd() {
	f.state.Store(stateDone)
	f.mu.Lock()
	f.end = time.Now()
	f.mu.Unlock()
}

// Close resets every connection and waits for the readers. Any goroutine, once.
func (f *Fleet) Close() {
	if f.state.Load() == stateMeasure {
		f.MeasureEnd()
	}
	f.state.Store(stateDone)
	f.mu.Lock()
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for _, c := range conns {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: thousands of closes leave no TIME_WAIT behind
		}
		_ = c.Close()
	}
	f.wg.Wait()
}

// Result is what the fleet measured in its window.
type Result struct {
	// Delivered counts messages received in the window; Latency their delivery latency in
	// microseconds (loadgen's histogram bounds).
	Delivered uint64
	Latency   *hdrhistogram.Histogram
	// Errors counts connection failures by kind (ErrConnect, ErrClosed, ErrProtocol) and
	// server closes as "close NNNN", in or out of the window.
	Errors map[string]uint64
	// Window is the measurement window.
	Window time.Duration
}

// Result returns the figures; call it after Close. Any goroutine.
func (f *Fleet) Result() *Result {
	r := &Result{Latency: loadgen.NewHistogram(), Errors: map[string]uint64{}}
	for i := range f.shards {
		s := &f.shards[i]
		s.mu.Lock()
		r.Latency.Merge(s.lat)
		r.Delivered += s.delivered
		for k, n := range s.errs {
			r.Errors[k] += n
		}
		s.mu.Unlock()
	}
	f.mu.Lock()
	if !f.start.IsZero() && f.end.After(f.start) {
		r.Window = f.end.Sub(f.start)
	}
	f.mu.Unlock()
	return r
}

func (f *Fleet) fail(i int, kind string) {
	s := &f.shards[i%shards]
	s.mu.Lock()
	s.errs[kind]++
	s.mu.Unlock()
}

// handshake dials connection i and upgrades it.
func (f *Fleet) handshake(ctx context.Context, i int) (net.Conn, *bufio.Reader, error) {
	d := net.Dialer{Timeout: f.cfg.DialTimeout}
	c, err := d.DialContext(ctx, "tcp", f.cfg.Addr)
	if err != nil {
		return nil, nil, err
	}
	var key [16]byte
	_, _ = rand.Read(key[:])
	req := "GET " + f.cfg.Path(i) + " HTTP/1.1\r\nHost: " + f.cfg.Host +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key[:]) +
		"\r\nSec-WebSocket-Version: 13\r\n\r\n"
	_ = c.SetDeadline(time.Now().Add(f.cfg.DialTimeout))
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return nil, nil, err
	}
	br := bufio.NewReaderSize(c, 1024)
	status, err := br.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if f := strings.Fields(status); len(f) < 2 || f[1] != "101" {
		c.Close()
		return nil, nil, fmt.Errorf("handshake: %q", strings.TrimSpace(status))
	}
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		if len(line) <= 2 {
			break
		}
	}
	_ = c.SetDeadline(time.Time{})
	return c, br, nil
}

// read reads frames until the connection ends: data messages are measured, pings answered,
// a close frame recorded and answered.
func (f *Fleet) read(i int, c net.Conn, br *bufio.Reader) {
	s := &f.shards[i%shards]
	var hdr [14]byte
	var ctl [125]byte
	for {
		if _, err := io.ReadFull(br, hdr[:2]); err != nil {
			f.ended(i, err)
			return
		}
		op := hdr[0] & 0x0f
		if hdr[1]&0x80 != 0 { // a server must not mask
			f.fail(i, ErrProtocol)
			return
		}
		n := uint64(hdr[1] & 0x7f)
		switch n {
		case 126:
			if _, err := io.ReadFull(br, hdr[2:4]); err != nil {
				f.ended(i, err)
				return
			}
			n = uint64(binary.BigEndian.Uint16(hdr[2:4]))
		case 127:
			if _, err := io.ReadFull(br, hdr[2:10]); err != nil {
				f.ended(i, err)
				return
			}
			n = binary.BigEndian.Uint64(hdr[2:10])
		}
		switch op {
		case 0x1, 0x2, 0x0: // text, binary, continuation: measure by the stamp of a first frame
			now := time.Now().UnixNano()
			var stamp [StampLen]byte
			k := min(n, StampLen)
			if _, err := io.ReadFull(br, stamp[:k]); err != nil {
				f.ended(i, err)
				return
			}
			if _, err := br.Discard(int(n - k)); err != nil {
				f.ended(i, err)
				return
			}
			if op == 0 {
				continue
			}
			f.received.Add(1)
			if k == StampLen && f.state.Load() == stateMeasure {
				lat := (now - int64(binary.LittleEndian.Uint64(stamp[:]))) / int64(time.Microsecond)
				s.mu.Lock()
				_ = s.lat.RecordValue(max(loadgen.HistLowestUs, min(loadgen.HistHighestUs, lat)))
				s.delivered++
				s.mu.Unlock()
			}
		case 0x8, 0x9, 0xA: // close, ping, pong
			if n > uint64(len(ctl)) {
				f.fail(i, ErrProtocol)
				return
			}
			p := ctl[:n]
			if _, err := io.ReadFull(br, p); err != nil {
				f.ended(i, err)
				return
			}
			switch op {
			case 0x9:
				if err := writeFrame(c, 0xA, p); err != nil {
					f.ended(i, err)
					return
				}
			case 0x8:
				code := 1005 // no status received
				if len(p) >= 2 {
					code = int(binary.BigEndian.Uint16(p))
				}
				f.fail(i, "close "+strconv.Itoa(code))
				_ = writeFrame(c, 0x8, p[:min(len(p), 2)])
				return
			}
		default:
			f.fail(i, ErrProtocol)
			return
		}
	}
}

// ended records why connection i's reader stopped (nothing once the fleet is closing).
func (f *Fleet) ended(i int, err error) {
	if f.state.Load() == stateDone {
		return
	}
	kind := ErrClosed
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) {
		var ne net.Error
		if !errors.As(err, &ne) {
			kind = ErrProtocol
		}
	}
	f.fail(i, kind)
}

// writeFrame writes a masked control frame (clients must mask) with payload p (at most 125
// bytes).
func writeFrame(c net.Conn, op byte, p []byte) error {
	var b [6 + 125]byte
	b[0] = 0x80 | op
	b[1] = 0x80 | byte(len(p))
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	copy(b[2:6], mask[:])
	for j, x := range p {
		b[6+j] = x ^ mask[j%4]
	}
	_, err := c.Write(b[:6+len(p)])
	return err
}
