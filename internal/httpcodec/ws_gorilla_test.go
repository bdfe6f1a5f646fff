package httpcodec

// Differential tests against github.com/gorilla/websocket (a test-only
// dependency): frames its client writes read back as the same messages
// here; frames written here read back the same in its client; and on
// arbitrary client byte streams, whatever gorilla's server rejects,
// WSReader rejects too, and what both accept reads the same, except for
// the deliberate differences knownWSDifference names.
//
// The connections are in memory (memConn): no goroutines, no timing.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memConn is a net.Conn in memory: Read drains in, Write appends to out.
// When handshake is set, the first Read answers the HTTP request written
// so far with this codec's handshake helpers (the server side of a
// gorilla client).
type memConn struct {
	in, out    bytes.Buffer
	handshake  bool
	protocols  []string
	handshaken bool
}

func (c *memConn) Read(p []byte) (int, error) {
	if c.handshake && !c.handshaken {
		c.handshaken = true
		var parser Parser
		var req Request
		n, err := parser.ParseHead(c.out.Bytes(), &req)
		if err != nil {
			return 0, err
		}
		key, err := CheckWSUpgrade(&req)
		if err != nil {
			return 0, err
		}
		proto, err := WSSelectProtocol(&req, c.protocols)
		if err != nil {
			return 0, err
		}
		resp, err := AppendWSUpgradeResponse(nil, key, proto)
		if err != nil {
			return 0, err
		}
		c.in.Write(resp)
		c.out.Next(n)
	}
	if c.in.Len() == 0 {
		return 0, io.EOF
	}
	return c.in.Read(p)
}

func (c *memConn) Write(p []byte) (int, error)        { return c.out.Write(p) }
func (c *memConn) Close() error                       { return nil }
func (c *memConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *memConn) SetDeadline(t time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(t time.Time) error { return nil }

// gorillaClient dials a gorilla client over a memConn served by this
// codec's handshake.
func gorillaClient(t testing.TB, writeBuf int, offer, support []string) (*websocket.Conn, *memConn, *http.Response) {
	mc := &memConn{handshake: true, protocols: support}
	d := websocket.Dialer{
		NetDial:         func(string, string) (net.Conn, error) { return mc, nil },
		WriteBufferSize: writeBuf,
		Subprotocols:    offer,
	}
	ws, resp, err := d.Dial("ws://example.com/chat", nil)
	require.NoError(t, err)
	return ws, mc, resp
}

type gorillaMsg struct {
	typ  int
	data []byte
}

// TestWSGorillaClientToReader: messages gorilla's client writes (whole,
// fragmented by a small write buffer, split inside code points, control
// frames between fragments' flushes) read back the same with WSReader.
func TestWSGorillaClientToReader(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, wb := range []int{64, 100, 4096} {
		ws, mc, resp := gorillaClient(t, wb, []string{"v2.game", "chat"}, []string{"chat", "v1"})
		assert.Equal(t, "chat", resp.Header.Get("Sec-WebSocket-Protocol"))
		assert.Equal(t, "chat", ws.Subprotocol())
		var sent []string
		for i := range 200 {
			var typ int
			var data []byte
			switch i % 5 {
			case 0, 1:
				typ = websocket.TextMessage
				var sb strings.Builder
				for range r.IntN(300) {
					sb.WriteString([]string{"a", "é", "€", "😀", "日本", " "}[r.IntN(6)])
				}
				data = []byte(sb.String())
			case 2:
				typ = websocket.BinaryMessage
				data = make([]byte, []int{0, 1, 125, 126, 127, 65535, 65536, 70000}[r.IntN(8)])
				for j := range data {
					data[j] = byte(r.Uint32())
				}
			case 3:
				typ = websocket.PingMessage
				data = []byte(strings.Repeat("p", r.IntN(126)))
			case 4:
				typ = websocket.PongMessage
				data = []byte(strings.Repeat("q", r.IntN(126)))
			}
			if typ == websocket.TextMessage && r.IntN(2) == 0 {
				// Through NextWriter in small writes, so that gorilla
				// flushes fragments wherever its buffer fills.
				w, err := ws.NextWriter(typ)
				require.NoError(t, err)
				for rest := data; len(rest) > 0; {
					k := min(len(rest), 1+r.IntN(40))
					_, err := w.Write(rest[:k])
					require.NoError(t, err)
					rest = rest[k:]
				}
				require.NoError(t, w.Close())
			} else if typ == websocket.PingMessage || typ == websocket.PongMessage {
				require.NoError(t, ws.WriteControl(typ, data, time.Time{}))
			} else {
				require.NoError(t, ws.WriteMessage(typ, data))
			}
			sent = append(sent, fmt.Sprintf("%d %q", typ, data))
		}
		require.NoError(t, ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4001, "done €")))
		sent = append(sent, `close 4001 "done €"`)

		wire := mc.out.Bytes()
		got := readAll(t, Config{MaxWSMessageBytes: 1 << 17}, wire)
		want := make([]string, 0, len(sent))
		for _, s := range sent {
			want = append(want, gorillaToEvent(s))
		}
		var gotMsgs []string
		for _, g := range got {
			if !strings.HasPrefix(g, "frag ") {
				gotMsgs = append(gotMsgs, g)
			}
		}
		require.Equal(t, want, gotMsgs, "write buffer %d", wb)
	}
}

// gorillaToEvent turns "<type> <quoted data>" into readerEvent's form.
func gorillaToEvent(s string) string {
	typ, data, _ := strings.Cut(s, " ")
	switch typ {
	case "1":
		return "text " + data
	case "2":
		return "binary " + data
	case "9":
		return "ping " + data
	case "10":
		return "pong " + data
	}
	return s
}

// TestWSWritersToGorillaClient: frames written by this codec read back the
// same in gorilla's client, including fragments framed with
// AppendWSFrameHeader and a close frame.
func TestWSWritersToGorillaClient(t *testing.T) {
	ws, mc, _ := gorillaClient(t, 0, nil, nil)
	var pings []string
	ws.SetPingHandler(func(s string) error { pings = append(pings, s); return nil })
	r := rand.New(rand.NewPCG(7, 8))
	var want []gorillaMsg
	var wire []byte
	for i := range 100 {
		n := []int{0, 5, 125, 126, 65535, 65536, 100000}[i%7]
		data := make([]byte, n)
		for j := range data {
			data[j] = 'a' + byte(r.IntN(26))
		}
		op, typ := WSText, websocket.TextMessage
		if i%2 == 1 {
			op, typ = WSBinary, websocket.BinaryMessage
		}
		var err error
		if i%3 == 0 && n > 2 {
			// Three fragments with a ping between them.
			a, b := n/3, 2*n/3
			wire, err = AppendWSFrameHeader(wire, op, false, a)
			require.NoError(t, err)
			wire = append(wire, data[:a]...)
			wire, err = AppendWSFrame(wire, WSPing, true, []byte(fmt.Sprint("ping", i)))
			require.NoError(t, err)
			wire, err = AppendWSFrame(wire, WSContinuation, false, data[a:b])
			require.NoError(t, err)
			wire, err = AppendWSFrame(wire, WSContinuation, true, data[b:])
			require.NoError(t, err)
		} else {
			wire, err = AppendWSFrame(wire, op, true, data)
			require.NoError(t, err)
		}
		want = append(want, gorillaMsg{typ, data})
	}
	wire, err := AppendWSClose(wire, WSCloseGoingAway, []byte("bye"))
	require.NoError(t, err)
	mc.in.Write(wire)

	for i, w := range want {
		typ, data, err := ws.ReadMessage()
		require.NoError(t, err, "message %d", i)
		require.Equal(t, w.typ, typ, "message %d", i)
		require.Equal(t, w.data, data, "message %d", i)
	}
	_, _, err = ws.ReadMessage()
	var ce *websocket.CloseError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, 1001, ce.Code)
	assert.Equal(t, "bye", ce.Text)
	assert.NotEmpty(t, pings)
}

// gorillaServerRead runs gorilla's server side over the client byte stream
// in and returns the events it reports in readerEvent's form, and how it
// ended: "eof" (ran out of bytes) or "reject".
func gorillaServerRead(in []byte, limit int64) ([]string, string) {
	mc := &memConn{}
	mc.in.Write(in)
	w := &hijackWriter{conn: mc}
	req, _ := http.NewRequest("GET", "http://example.com/", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	u := websocket.Upgrader{}
	ws, err := u.Upgrade(w, req, nil)
	if err != nil {
		panic(err)
	}
	ws.SetReadLimit(limit)
	var evs []string
	ws.SetPingHandler(func(s string) error { evs = append(evs, fmt.Sprintf("ping %q", s)); return nil })
	ws.SetPongHandler(func(s string) error { evs = append(evs, fmt.Sprintf("pong %q", s)); return nil })
	ws.SetCloseHandler(func(code int, text string) error {
		evs = append(evs, fmt.Sprintf("close %d %q", code, text))
		return nil
	})
	for {
		typ, data, err := ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				if ce.Code == websocket.CloseAbnormalClosure {
					return evs, "eof"
				}
				if len(evs) > 0 && strings.HasPrefix(evs[len(evs)-1], "close ") {
					return evs, "closed"
				}
			}
			return evs, "reject"
		}
		if typ == websocket.TextMessage {
			evs = append(evs, fmt.Sprintf("text %q", data))
		} else {
			evs = append(evs, fmt.Sprintf("binary %q", data))
		}
	}
}

// hijackWriter is the http.ResponseWriter gorilla's Upgrader hijacks.
type hijackWriter struct {
	conn *memConn
	h    http.Header
}

func (w *hijackWriter) Header() http.Header {
	if w.h == nil {
		w.h = http.Header{}
	}
	return w.h
}
func (w *hijackWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *hijackWriter) WriteHeader(int)             {}
func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, bufio.NewReadWriter(bufio.NewReader(w.conn), bufio.NewWriter(w.conn)), nil
}

// knownWSDifference names the rules WSReader enforces and gorilla's server
// does not, or returns "".
func knownWSDifference(err error) string {
	switch err {
	case errWSNonMinimal:
		return "payload length not minimally encoded (RFC 6455 §5.2 requires the minimal encoding; gorilla does not check)"
	case errWSTextUTF8:
		return "text message not UTF-8 (RFC 6455 §8.1; gorilla leaves it to the application)"
	case errWSCloseLength1:
		return "close payload of 1 byte (RFC 6455 §5.5.1; gorilla reads it as no status)"
	}
	return ""
}

// wsDiffOne compares WSReader and gorilla's server on one client byte
// stream: WSReader's events must be a prefix of gorilla's; if gorilla
// rejects, WSReader rejects; if WSReader rejects and gorilla does not, the
// reason is a known difference; if neither rejects, the events are equal.
func wsDiffOne(t testing.TB, in []byte, limit int64) {
	t.Helper()
	gev, gend := gorillaServerRead(bytes.Clone(in), limit)
	var r WSReader
	r.Init(Config{MaxWSMessageBytes: limit})
	var m WSMessage
	var ev []string
	buf := bytes.Clone(in)
	var rerr error
	for {
		n, ok, err := r.Next(buf, &m)
		if err != nil {
			if err != ErrNeedMore {
				rerr = err
			}
			break
		}
		if ok {
			ev = append(ev, readerEvent(n, ok, nil, &m))
		}
		buf = buf[n:]
		if ok && m.Opcode == WSClose {
			break
		}
	}
	if len(ev) > len(gev) || !slicesEqual(ev, gev[:len(ev)]) {
		t.Fatalf("events differ\nbaton   %q (%v)\ngorilla %q (%s)\ninput %q", ev, rerr, gev, gend, in)
	}
	switch {
	case gend == "reject" && rerr == nil:
		t.Fatalf("gorilla rejects, baton does not\nevents %q\ninput %q", ev, in)
	case rerr != nil && gend == "eof" && knownWSDifference(rerr) == "":
		// WSReader decides as soon as the deciding bytes are in; gorilla
		// reads a whole header first. Given more bytes, gorilla must
		// reject too.
		padded := append(bytes.Clone(in), make([]byte, 64+limit)...)
		if _, end := gorillaServerRead(padded, limit); end != "reject" {
			t.Fatalf("baton rejects (%v) a truncated stream gorilla does not reject even when padded (%s)\ninput %q", rerr, end, in)
		}
	case rerr != nil && gend != "reject":
		if knownWSDifference(rerr) == "" {
			t.Fatalf("baton rejects (%v), gorilla does not\nevents %q / %q\ninput %q", rerr, ev, gev, in)
		}
	case rerr == nil && len(ev) != len(gev):
		t.Fatalf("events differ\nbaton   %q\ngorilla %q (%s)\ninput %q", ev, gev, gend, in)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// wsGenStream returns a random client byte stream of valid frames, with
// occasional mutations.
func wsGenStream(r *rand.Rand, mutate bool) []byte {
	var out []byte
	inMsg := false
	for range 1 + r.IntN(6) {
		var op WSOpcode
		fin := true
		switch r.IntN(6) {
		case 0, 1:
			if inMsg {
				op = WSContinuation
			} else {
				op = []WSOpcode{WSText, WSBinary}[r.IntN(2)]
			}
			fin = r.IntN(2) == 0
			inMsg = !fin
		case 2:
			op = WSPing
		case 3:
			op = WSPong
		default:
			if inMsg {
				op = WSContinuation
				inMsg = false
			} else {
				op = WSText
			}
		}
		var p []byte
		switch {
		case op.IsControl():
			p = []byte(strings.Repeat("c", r.IntN(20)))
		default:
			for range r.IntN(40) {
				p = append(p, []string{"a", "é", "€", "😀"}[r.IntN(4)]...)
			}
			if r.IntN(20) == 0 {
				p = append(p, bytes.Repeat([]byte{'L'}, 200)...)
			}
		}
		b0 := byte(op)
		if fin {
			b0 |= 0x80
		}
		out = append(out, wsClientFrame(b0, p, r.Uint32(), 0)...)
	}
	if r.IntN(4) == 0 {
		code := []uint16{1000, 1001, 1004, 1005, 1012, 1015, 2000, 3000, 4999, 5000}[r.IntN(10)]
		reason := []string{"", "bye", "\xff"}[r.IntN(3)]
		out = append(out, wsClientFrame(0x88, append([]byte{byte(code >> 8), byte(code)}, reason...), r.Uint32(), 0)...)
	}
	if mutate {
		for range 1 + r.IntN(3) {
			i := r.IntN(len(out))
			switch r.IntN(3) {
			case 0:
				out[i] ^= byte(1 << r.IntN(8))
			case 1:
				out = append(out[:i], out[min(len(out), i+1+r.IntN(3)):]...)
			case 2:
				out = append(out[:i], append([]byte{byte(r.Uint32())}, out[i:]...)...)
			}
			if len(out) == 0 {
				break
			}
		}
	}
	return out
}

func TestWSDifferentialGorillaServer(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	count := 3000
	if testing.Short() {
		count = 300
	}
	for i := range count {
		in := wsGenStream(r, i%2 == 1)
		if len(in) == 0 {
			continue
		}
		wsDiffOne(t, in, []int64{100, 1 << 16}[i%2])
	}
	// The named differences, each shown once.
	for _, c := range []struct{ why, in string }{
		{"non-minimal length", string(wsClientFrame(0x82, []byte("abc"), 7, 16))},
		{"invalid UTF-8 text", string(wsFrame(WSText, true, "\xff"))},
		{"close payload of 1 byte", string(wsFrame(WSClose, true, "\x03"))},
	} {
		gev, gend := gorillaServerRead([]byte(c.in), 1<<16)
		assert.NotEqual(t, "reject", gend, "%s: gorilla now rejects it (%q); drop it from knownWSDifference", c.why, gev)
		_, _, err := (&WSReader{}).Next([]byte(c.in), &WSMessage{})
		require.Error(t, err, c.why)
		assert.NotEmpty(t, knownWSDifference(err), c.why)
	}
}

// utf8ValidOrBinary is used by the fuzzer to check text payloads.
func utf8ValidOrBinary(m *WSMessage) bool { return m.Opcode != WSText || utf8.Valid(m.Payload) }
