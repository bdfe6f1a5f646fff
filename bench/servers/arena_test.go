package servers

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/bench/arena"
	"github.com/batonrt/baton/bench/arenaload"
)

// TestArenaRoutes: on every target, arenaload's players join 3 rooms, send inputs and
// receive their own room's states at 20 Hz, acknowledging their inputs; a bad room or
// slot gets 400.
func TestArenaRoutes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("arenaload is Linux only (epoll)")
	}
	for _, target := range wsTargets() {
		t.Run(target, func(t *testing.T) {
			srv, err := Start(target, "127.0.0.1:0", nil)
			require.NoError(t, err)
			defer srv.Close()
			for _, q := range []string{"room=x&slot=0", "room=1&slot=4", "room=1", "room=-1&slot=0"} {
				resp, err := http.Get("http://" + srv.Addr() + ArenaPath + "?" + q)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, 400, resp.StatusCode, q)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := arenaload.Run(ctx, arenaload.Config{Addr: srv.Addr(), Rooms: 3, Warmup: 200 * time.Millisecond, Duration: time.Second})
			require.NoError(t, err)
			assert.Equal(t, 12, res.Players)
			assert.Equal(t, 12, res.Connected)
			assert.Empty(t, res.Errors)
			assert.Zero(t, res.Undecoded, "every message a state of the player's own room")
			assert.Positive(t, res.States)
			assert.Positive(t, res.InputsSent)
			assert.Positive(t, res.Lat.TotalCount(), "inputs acknowledged in states")
			assert.Positive(t, res.Gap.TotalCount())
			// 20 Hz: the median gap is a period (wide bounds: the machine may be busy).
			assert.InDelta(t, arena.Period.Microseconds(), res.Gap.ValueAtQuantile(50), float64(arena.Period.Microseconds())/2)
			assert.Greater(t, res.DeliveredRatio(), 0.5)
		})
	}
}

// TestFloorProtocol: the floor answers what its load generators do not send with the
// status or close code a WebSocket server owes: a ping gets its pong, a client close is
// echoed, an unmasked frame is closed with 1002, an oversized head gets 431, an unknown
// route 404 and a second join of a slot replaces the first (1000).
func TestFloorProtocol(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the floor is Linux only")
	}
	srv, err := Start(Floor, "127.0.0.1:0", nil)
	require.NoError(t, err)
	defer srv.Close()

	resp, err := http.Get("http://" + srv.Addr() + "/plaintext")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 404, resp.StatusCode)
	resp, err = http.Get("http://" + srv.Addr() + ArenaPath + "?room=1&slot=0")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 426, resp.StatusCode, "not an upgrade")

	c, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	_, err = io.WriteString(c, "GET / HTTP/1.1\r\nX: "+strings.Repeat("a", 9000)+"\r\n\r\n")
	require.NoError(t, err)
	status, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	assert.Contains(t, status, "431")
	c.Close()

	dial := func(path string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", srv.Addr())
		require.NoError(t, err)
		_, err = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		require.NoError(t, err)
		br := bufio.NewReader(c)
		head := ""
		for !strings.HasSuffix(head, "\r\n\r\n") {
			line, err := br.ReadString('\n')
			require.NoError(t, err)
			head += line
		}
		require.True(t, strings.HasPrefix(head, "HTTP/1.1 101"), head)
		require.Contains(t, head, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n", "RFC 6455's example key")
		return c, br
	}
	// readFrame returns the next frame from the server, skipping states.
	readFrame := func(br *bufio.Reader) (op byte, p []byte) {
		for {
			var h [2]byte
			_, err := io.ReadFull(br, h[:])
			require.NoError(t, err)
			require.Zero(t, h[1]&0x80, "the server does not mask")
			p = make([]byte, h[1]&0x7F)
			_, err = io.ReadFull(br, p)
			require.NoError(t, err)
			if op = h[0] & 0x0F; op != 0x2 {
				return op, p
			}
		}
	}
	masked := func(op byte, p []byte) []byte {
		b := []byte{0x80 | op, 0x80 | byte(len(p)), 1, 2, 3, 4}
		for i, x := range p {
			b = append(b, x^b[2+i%4])
		}
		return b
	}

	a, abr := dial(ArenaPath + "?room=7&slot=1")
	_, err = a.Write(masked(0x9, []byte("hi")))
	require.NoError(t, err)
	op, p := readFrame(abr)
	assert.Equal(t, byte(0xA), op)
	assert.Equal(t, "hi", string(p))
	// an input is applied: the states acknowledge it
	_, err = a.Write(masked(0x2, arena.AppendInput(nil, arena.Input{Seq: 5, DX: 1})))
	require.NoError(t, err)
	for {
		var h [2]byte
		_, err := io.ReadFull(abr, h[:])
		require.NoError(t, err)
		st := make([]byte, h[1]&0x7F)
		_, err = io.ReadFull(abr, st)
		require.NoError(t, err)
		s, ok := arena.ParseState(st)
		require.True(t, ok)
		require.Equal(t, uint32(7), s.Room)
		if s.Ack[1] == 5 {
			break
		}
	}
	// a second join of slot 1 replaces the first with 1000
	b, bbr := dial(ArenaPath + "?room=7&slot=1")
	defer b.Close()
	op, p = readFrame(abr)
	assert.Equal(t, byte(0x8), op)
	assert.Equal(t, uint16(1000), binary.BigEndian.Uint16(p))
	a.Close()
	// a client close is echoed
	_, err = b.Write(masked(0x8, []byte{0x03, 0xE8}))
	require.NoError(t, err)
	op, p = readFrame(bbr)
	assert.Equal(t, byte(0x8), op)
	assert.Equal(t, uint16(1000), binary.BigEndian.Uint16(p))

	// an unmasked frame is a protocol error
	w, wbr := dial("/ws/room-0")
	defer w.Close()
	_, err = w.Write([]byte{0x82, 1, 0})
	require.NoError(t, err)
	op, p = readFrame(wbr)
	assert.Equal(t, byte(0x8), op)
	assert.Equal(t, uint16(1002), binary.BigEndian.Uint16(p))
}
