package ws

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"github.com/klauspost/compress/flate"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
)

// countConn counts the bytes a client connection reads and writes on the wire.
type countConn struct {
	net.Conn
	in, out atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// gameState is a JSON game state of 4 players (about 1 KiB), tick t.
func gameState(t int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"tick":%d,"players":[`, t)
	for i := range 4 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"player-%d","name":"Player %d","x":%d.%d,"y":%d.%d,"vx":%d,"vy":%d,"hp":%d,"score":%d,"alive":true,"team":"%s","weapon":"blaster","ammo":%d,"buffs":["speed","shield"]}`,
			i, i, 100+t*3+i*17, t%10, 200+t*2+i*31, (t+i)%10, (t+i)%7-3, (t*i)%5-2, 100-(t+i)%40, t*10+i, []string{"red", "blue"}[i%2], 30-(t+i)%30)
	}
	b.WriteString(`],"projectiles":[{"x":12.5,"y":99.25,"dx":1,"dy":0},{"x":40.75,"y":3.5,"dx":0,"dy":-1}],"events":[]}`)
	return []byte(b.String())
}

// steady turns off cfg's refusal of upgrades while the loop is saturated: these tests
// compress megabytes in the test process and run beside a CPU hog, where the loop's lag
// would refuse an upgrade (503) that the test is not about.
func steady(cfg Config) Config {
	cfg.SaturatedLag, cfg.SaturatedUtilisation = -1, -1
	return cfg
}

// deflateEcho is an echo handler upgrading with cfg.
func deflateEcho(cfg Config) loop.HandlerFunc {
	return func(c *loop.Ctx) {
		w, err := Upgrade(c, cfg)
		if err != nil {
			return
		}
		for {
			bin, p, err := w.ReadMessage()
			if err != nil {
				return
			}
			if bin {
				err = w.WriteBinary(p)
			} else {
				err = w.WriteText(p)
			}
			if err != nil {
				return
			}
		}
	}
}

// noise returns n bytes deflate cannot shrink.
func noise(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(b)
	return b
}

// deflateDialer is a gorilla client with compression on that counts its wire bytes.
func deflateDialer(cc **countConn) *websocket.Dialer {
	return &websocket.Dialer{HandshakeTimeout: 10 * time.Second, EnableCompression: true, WriteBufferSize: 1024,
		NetDial: func(network, addr string) (net.Conn, error) {
			c, err := net.Dial(network, addr)
			if err != nil {
				return nil, err
			}
			*cc = &countConn{Conn: c}
			return *cc, nil
		}}
}

// TestDeflateGorilla: gorilla/websocket with compression on negotiates permessage-deflate,
// with a handler of either form;
// messages of every size round-trip both ways (gorilla compresses what it sends, the
// server what it echoes), a message gorilla fragments arrives whole, and a compressible
// message costs far fewer bytes on the wire both ways.
func TestDeflateGorilla(t *testing.T) {
	for _, form := range []string{"task", "callback"} {
		t.Run(form, func(t *testing.T) { testDeflateGorilla(t, form) })
	}
}

func testDeflateGorilla(t *testing.T, form string) {
	done := make(chan error, 1)
	h := wsEcho(done)
	if form == "callback" {
		h = wsCallbackEcho(done)
	}
	s, addr := startWS(t, loop.Config{}, steady(Config{Compression: true}), func(s *loop.Server) {
		s.Handle("GET /ws", h)
	})
	var cc *countConn
	conn, resp, err := deflateDialer(&cc).Dial("ws://"+addr+"/ws", nil)
	require.NoError(t, err)
	defer conn.Close()
	require.Equal(t, "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
		resp.Header.Get("Sec-WebSocket-Extensions"))

	big := bytes.Repeat(gameState(1), 64) // 52 KB of JSON
	rnd := noise(5000)
	for _, m := range [][]byte{nil, []byte("a"), bytes.Repeat([]byte("x"), 127), bytes.Repeat([]byte("y"), 128), gameState(2), rnd, big} {
		for _, kind := range []int{websocket.TextMessage, websocket.BinaryMessage} {
			if kind == websocket.TextMessage && !utf8.Valid(m) {
				continue
			}
			in0, out0 := cc.in.Load(), cc.out.Load()
			require.NoError(t, conn.WriteMessage(kind, m))
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			k, got, err := conn.ReadMessage()
			require.NoError(t, err)
			require.Equal(t, kind, k)
			require.Equal(t, len(m), len(got))
			require.True(t, bytes.Equal(m, got), "message of %d bytes came back changed", len(m))
			if len(m) == len(big) {
				require.Less(t, cc.out.Load()-out0, int64(len(big)/20), "client to server: not compressed")
				require.Less(t, cc.in.Load()-in0, int64(len(big)/20), "server to client: not compressed")
			}
		}
	}
	// A message gorilla writes in many frames (its write buffer is 1 KiB): the first
	// frame has RSV1, the continuations do not.
	w, err := conn.NextWriter(websocket.TextMessage)
	require.NoError(t, err)
	for i := range 40 {
		_, err = w.Write(gameState(i))
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	_, got, err := conn.ReadMessage()
	require.NoError(t, err)
	var want []byte
	for i := range 40 {
		want = append(want, gameState(i)...)
	}
	require.Equal(t, string(want), string(got))

	// The websockets page: what went compressed each way, and what it cost on the wire.
	doc := wsStats(t, s)
	require.Len(t, doc.Routes, 1)
	r := doc.Routes[0]
	require.True(t, r.Config.Compression)
	require.Equal(t, 128, r.Config.Threshold)
	require.Equal(t, "deflate", doc.Connections[0].Compression)
	// gorilla compresses all 14 messages it sent (the empty one and the noise too); the
	// server the 7 of at least 128 bytes that shrink (128 bytes, the state and the 52 KB
	// both ways, the fragmented message).
	require.Equal(t, uint64(14), r.MessagesIn)
	require.Equal(t, uint64(14), r.CompressedIn)
	require.Equal(t, uint64(14), r.MessagesOut)
	require.Equal(t, uint64(7), r.CompressedOut)
	require.Less(t, r.CompressedBytesOut, r.BytesOut/10)
	require.Less(t, r.CompressedBytesIn, r.BytesIn/10)

	require.NoError(t, conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "")))
	var ce *CloseError
	require.ErrorAs(t, recvErr(t, done), &ce)
}

// deflateRawDial is wsRawDial offering ext (Sec-WebSocket-Extensions); it returns the
// extension the server accepted.
func deflateRawDial(t testing.TB, addr, ext string) (*wsRaw, string) {
	return deflateRawDialPath(t, addr, "/ws", ext)
}

// deflateRawDialPath is deflateRawDial to path.
func deflateRawDialPath(t testing.TB, addr, path, ext string) (*wsRaw, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: %s\r\n\r\n", path, addr, ext)
	require.NoError(t, err)
	r := &wsRaw{c: c}
	r.br = bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r.br, nil)
	require.NoError(t, err)
	require.Equal(t, 101, resp.StatusCode)
	return r, resp.Header.Get("Sec-WebSocket-Extensions")
}

// rawFrame is a masked client frame: b0 is its first byte (FIN, RSV, opcode).
func rawFrame(b0 byte, p []byte) []byte {
	var f []byte
	switch {
	case len(p) < 126:
		f = []byte{b0, 0x80 | byte(len(p))}
	case len(p) <= 0xffff:
		f = []byte{b0, 0x80 | 126, byte(len(p) >> 8), byte(len(p))}
	default:
		f = binary.BigEndian.AppendUint64([]byte{b0, 0x80 | 127}, uint64(len(p)))
	}
	return append(f, maskBytes([]byte{9, 8, 7, 6}, p)...)
}

// deflated compresses p as a no-context-takeover message: a sync flush, its tail stripped.
func deflated(t testing.TB, p []byte) []byte {
	var b bytes.Buffer
	fw, err := flate.NewWriter(&b, flate.BestSpeed)
	require.NoError(t, err)
	_, _ = fw.Write(p)
	require.NoError(t, fw.Flush())
	return bytes.TrimSuffix(b.Bytes(), deflateTail[:])
}

// readRaw reads one server frame and returns its first byte and payload.
func (r *wsRaw) readRaw(t testing.TB) (byte, []byte) {
	t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b0, err := r.br.ReadByte()
	require.NoError(t, err)
	require.NoError(t, r.br.UnreadByte())
	_, p, _ := r.readFrame(t)
	return b0, p
}

// inflated decompresses a server message (dict: the client's window with context takeover).
func inflated(t testing.TB, z, dict []byte) []byte {
	t.Helper()
	fr := flate.NewReaderDict(io.MultiReader(bytes.NewReader(z), bytes.NewReader(deflateTail[:])), dict)
	out, err := io.ReadAll(fr)
	if err != io.ErrUnexpectedEOF {
		require.NoError(t, err)
	}
	return out
}

// expectClose reads frames until the server's close frame and checks its code.
func (r *wsRaw) expectClose(t testing.TB, code uint16) {
	t.Helper()
	for {
		b0, p := r.readRaw(t)
		if httpcodec.WSOpcode(b0&0x0f) == httpcodec.WSClose {
			require.GreaterOrEqual(t, len(p), 2)
			require.Equal(t, code, binary.BigEndian.Uint16(p), "close reason %q", p[2:])
			return
		}
	}
}

// TestDeflateEdgeCases: over a raw socket, autobahn-style cases a client library will
// not produce: an empty compressed message (no payload, and RFC 7692's single 0x00), a
// fragmented message split exactly at a sync-flush boundary, a message sent with its
// tail not stripped, and the threshold: a short message goes uncompressed.
func TestDeflateEdgeCases(t *testing.T) {
	_, addr := startWS(t, loop.Config{}, steady(Config{Compression: true, CompressionThreshold: 200}), func(s *loop.Server) {
		s.Handle("GET /ws", wsEcho(nil))
	})
	r, ext := deflateRawDial(t, addr, "permessage-deflate; client_max_window_bits")
	require.Equal(t, "permessage-deflate; server_no_context_takeover; client_no_context_takeover", ext)

	echo := func(want string) (byte, string) {
		b0, p := r.readRaw(t)
		if b0&0x40 != 0 {
			p = inflated(t, p, nil)
		}
		require.Equal(t, want, string(p))
		return b0, string(p)
	}
	// Empty compressed messages: RSV1 with no payload, and the single 0x00 byte.
	r.write(t, rawFrame(0xc1, nil))
	b0, _ := echo("")
	require.Zero(t, b0&0x40, "an empty message is sent uncompressed")
	r.write(t, rawFrame(0xc2, []byte{0}))
	echo("")

	// Two sync-flushed pieces, the message split between frames exactly at the first
	// flush's end; a ping between the fragments.
	var b bytes.Buffer
	fw, _ := flate.NewWriter(&b, flate.BestSpeed)
	_, _ = fw.Write([]byte(strings.Repeat("hello ", 30)))
	_ = fw.Flush()
	first := append([]byte(nil), b.Bytes()...)
	b.Reset()
	_, _ = fw.Write([]byte(strings.Repeat("world ", 30)))
	_ = fw.Flush()
	second := bytes.TrimSuffix(b.Bytes(), deflateTail[:])
	r.write(t, append(append(rawFrame(0x41, first), rawFrame(0x89, []byte("p"))...), rawFrame(0x80, second)...))
	pb0, _ := r.readRaw(t)
	require.Equal(t, byte(0x8a), pb0, "the pong between the fragments")
	b0, _ = echo(strings.Repeat("hello ", 30) + strings.Repeat("world ", 30))
	require.Equal(t, byte(0xc1), b0, "text, compressed")

	// The tail left on (RFC 7692, 7.2.3.? allows a sender's flush to stay): one more empty
	// stored block.
	r.write(t, rawFrame(0xc1, append(deflated(t, []byte(strings.Repeat("abc", 50))), deflateTail[:]...)))
	echo(strings.Repeat("abc", 50))

	// The threshold: 199 bytes go plain, 200 compressed.
	r.write(t, rawFrame(0x81, []byte(strings.Repeat("z", 199))))
	b0, _ = echo(strings.Repeat("z", 199))
	require.Equal(t, byte(0x81), b0)
	r.write(t, rawFrame(0x81, []byte(strings.Repeat("z", 200))))
	b0, _ = echo(strings.Repeat("z", 200))
	require.Equal(t, byte(0xc1), b0)
	// Incompressible data goes plain whatever its size.
	rnd := noise(300)
	r.write(t, rawFrame(0x82, rnd))
	b0, p := r.readRaw(t)
	require.Equal(t, byte(0x82), b0)
	require.Equal(t, rnd, p)
}

// TestDeflateProtocolErrors: RSV1 where RFC 7692 forbids it is 1002 (on a control frame, on
// a continuation, on any frame without the extension negotiated); data that is not deflate
// or inflates to text that is not UTF-8 is 1007.
func TestDeflateProtocolErrors(t *testing.T) {
	_, addr := startWS(t, loop.Config{}, steady(Config{Compression: true}), func(s *loop.Server) {
		s.Handle("GET /ws", wsEcho(nil))
	})
	_, plainAddr := startWS(t, loop.Config{}, steady(Config{}), func(s *loop.Server) {
		s.Handle("GET /ws", wsEcho(nil))
	})
	z := deflated(t, []byte("hello"))
	for _, tc := range []struct {
		name  string
		addr  string
		frame []byte
		code  uint16
	}{
		{"rsv1 on ping", addr, rawFrame(0xc9, nil), 1002},
		{"rsv1 on close", addr, rawFrame(0xc8, []byte{3, 232}), 1002},
		{"rsv1 on continuation", addr, append(rawFrame(0x41, z[:2]), rawFrame(0xc0, z[2:])...), 1002},
		{"rsv1 not negotiated", plainAddr, rawFrame(0xc1, z), 1002},
		{"rsv2 negotiated", addr, rawFrame(0xa1, z), 1002},
		{"not deflate", addr, rawFrame(0xc2, []byte{0xff, 0xff, 0xff, 0xff, 0xff}), 1007},
		{"inflates to bad utf-8", addr, rawFrame(0xc1, deflated(t, []byte{'a', 0xff, 0xfe})), 1007},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := deflateRawDial(t, tc.addr, "permessage-deflate")
			r.write(t, tc.frame)
			r.expectClose(t, tc.code)
			r.expectEnd(t)
		})
	}
}

// TestDeflateZipBomb: a compressed message of 4 KB that inflates to 4 MiB, past
// MaxMessageBytes (64 KiB), is refused with 1009 as soon as the bound is passed, and the
// other connections of the loop play on.
func TestDeflateZipBomb(t *testing.T) {
	done := make(chan error, 2)
	_, addr := startWS(t, loop.Config{}, steady(Config{Compression: true, MaxMessageBytes: 64 << 10}), func(s *loop.Server) {
		s.Handle("GET /ws", wsEcho(done))
	})
	var cc *countConn
	other, _, err := deflateDialer(&cc).Dial("ws://"+addr+"/ws", nil)
	require.NoError(t, err)
	defer other.Close()

	bomb := deflated(t, make([]byte, 4<<20))
	require.Less(t, len(bomb), 64<<10)
	r, _ := deflateRawDial(t, addr, "permessage-deflate")
	r.write(t, rawFrame(0xc2, bomb))
	r.expectClose(t, 1009)
	r.expectEnd(t)
	var we *httpcodec.WSError
	require.ErrorAs(t, recvErr(t, done), &we)
	require.Equal(t, uint16(1009), we.Code)

	// Just under the bound inflates fine, on the other connection.
	m := bytes.Repeat([]byte("a"), 64<<10)
	require.NoError(t, other.WriteMessage(websocket.BinaryMessage, m))
	_ = other.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, got, err := other.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, m, got)
}

// TestDeflateContextTakeover: with CompressionContextTakeover, a client that offers plain
// permessage-deflate keeps its context both ways: the server's second copy of a message
// refers back to the first (and costs a fraction of it), and the client's does too (the
// server inflates it with its window); a window the client limits is kept.
func TestDeflateContextTakeover(t *testing.T) {
	s, addr := startWS(t, loop.Config{}, steady(Config{Compression: true, CompressionContextTakeover: true}), func(s *loop.Server) {
		s.Handle("GET /ws", wsEcho(nil))
	})
	r, ext := deflateRawDial(t, addr, "permessage-deflate; client_max_window_bits")
	require.Equal(t, "permessage-deflate", ext)

	// The client compresses with one stream across messages.
	var b bytes.Buffer
	fw, _ := flate.NewWriter(&b, flate.BestSpeed)
	var window []byte
	var sizes []int
	for i := range 4 {
		m := gameState(i)
		b.Reset()
		_, _ = fw.Write(m)
		_ = fw.Flush()
		r.write(t, rawFrame(0xc1, bytes.TrimSuffix(b.Bytes(), deflateTail[:])))
		b0, z := r.readRaw(t)
		require.Equal(t, byte(0xc1), b0)
		got := inflated(t, z, window)
		require.Equal(t, string(m), string(got))
		window = append(window, got...)
		sizes = append(sizes, len(z))
	}
	require.Less(t, sizes[3], sizes[0]/2, "with context takeover, later states cost less: %v", sizes)

	// The client refusing the server's takeover is honoured.
	_, ext = deflateRawDial(t, addr, "permessage-deflate; server_no_context_takeover")
	require.Equal(t, "permessage-deflate; server_no_context_takeover", ext)
	// A window the client limits is echoed and kept.
	r, ext = deflateRawDial(t, addr, "permessage-deflate; server_max_window_bits=9")
	require.Equal(t, "permessage-deflate; server_max_window_bits=9", ext)
	// Compressed with context, and no reference reaches back past 512 bytes: each message
	// decompresses with only the last 512 bytes of the client's window as its dictionary
	// (Python's zlib, in TestDeflatePython, enforces the window within messages too).
	window = nil
	for i := range 5 {
		m := []byte(strings.Repeat(fmt.Sprintf("state %d;", i%2), 30+i*30)) // 240 to 1200 bytes
		r.write(t, rawFrame(0x81, m))
		b0, p := r.readRaw(t)
		require.Equal(t, byte(0xc1), b0)
		require.Equal(t, string(m), string(inflated(t, p, window[max(0, len(window)-512):])))
		window = append(window, m...)
	}
	// The websockets page names what each connection negotiated.
	var terms []string
	for _, c := range wsStats(t, s).Connections {
		terms = append(terms, c.Compression)
	}
	require.ElementsMatch(t, []string{"deflate takeover-out takeover-in", "deflate takeover-in",
		"deflate takeover-out takeover-in window-512"}, terms)
}

// TestDeflatePrepared: a PreparedMessage is compressed once, for the first connection
// that negotiated compression, and that frame goes to every such connection (with or
// without context takeover), the plain frame to the others.
func TestDeflatePrepared(t *testing.T) {
	state := gameState(7)
	m := NewPrepared(false, state)
	var conns []*Conn
	ready := make(chan struct{}, 1)
	s, addr := startWS(t, loop.Config{}, steady(Config{}), func(s *loop.Server) {
		h := func(cfg Config) loop.HandlerFunc {
			return func(c *loop.Ctx) {
				w, err := Upgrade(c, cfg)
				if err != nil {
					return
				}
				conns = append(conns, w)
				ready <- struct{}{}
				for {
					if _, _, err := w.ReadMessage(); err != nil {
						return
					}
				}
			}
		}
		s.Handle("GET /ws", h(steady(Config{Compression: true})))
		s.Handle("GET /take", h(steady(Config{Compression: true, CompressionContextTakeover: true})))
	})
	var cc *countConn
	a, _, err := deflateDialer(&cc).Dial("ws://"+addr+"/ws", nil)
	require.NoError(t, err)
	defer a.Close()
	<-ready
	plain := wsDial(t, addr, "/ws", nil)
	<-ready
	raw, ext := deflateRawDialPath(t, addr, "/take", "permessage-deflate")
	require.Equal(t, "permessage-deflate", ext)
	<-ready
	var first, after *[]byte
	onLoop(t, s, func() {
		require.NoError(t, conns[0].Send(m))
		first = m.z.Load()
		require.Equal(t, 2, Broadcast(m, conns[1:]))
		after = m.z.Load()
	})
	require.NotNil(t, first)
	require.NotEmpty(t, *first)
	require.Same(t, first, after, "compressed once")
	for _, c := range []*websocket.Conn{a, plain} {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, got, err := c.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, string(state), string(got))
	}
	b0, z := raw.readRaw(t)
	require.Equal(t, byte(0xc1), b0)
	require.Equal(t, string(state), string(inflated(t, z, nil)))
	require.Less(t, len(z), len(state)/2)
}
