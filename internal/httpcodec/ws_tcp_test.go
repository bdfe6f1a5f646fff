package httpcodec

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wsEchoServer serves one connection on ln with this codec only: it reads
// the handshake with ParseHead, answers it, then echoes data messages,
// answers pings, and echoes a close frame; a *WSError is answered with a
// close frame carrying its code. Reads arrive in whatever pieces TCP
// delivers, so the incremental paths run for real. It returns the
// server's error on done.
func wsEchoServer(ln net.Listener, done chan<- error) {
	conn, err := ln.Accept()
	if err != nil {
		done <- err
		return
	}
	defer conn.Close()
	var (
		buf    []byte
		tmp    = make([]byte, 1500)
		parser Parser
		req    Request
		r      WSReader
		m      WSMessage
		out    []byte
	)
	read := func() error {
		n, err := conn.Read(tmp)
		buf = append(buf, tmp[:n]...)
		return err
	}
	for {
		n, err := parser.ParseHead(buf, &req)
		if err == ErrNeedMore {
			if err := read(); err != nil {
				done <- err
				return
			}
			continue
		}
		if err != nil {
			done <- err
			return
		}
		key, err := CheckWSUpgrade(&req)
		if err != nil {
			done <- err
			return
		}
		out, _ = AppendWSUpgradeResponse(out[:0], key, nil)
		buf = buf[n:]
		break
	}
	if _, err := conn.Write(out); err != nil {
		done <- err
		return
	}
	for {
		out = out[:0]
		for {
			n, ok, err := r.Next(buf, &m)
			if err == ErrNeedMore {
				break
			}
			var we *WSError
			if errors.As(err, &we) {
				out, _ = AppendWSClose(out, we.Code, []byte(we.Reason))
				_, _ = conn.Write(out)
				done <- err
				return
			}
			if ok {
				switch m.Opcode {
				case WSText, WSBinary:
					out, _ = AppendWSFrame(out, m.Opcode, true, m.Payload)
				case WSPing:
					out, _ = AppendWSFrame(out, WSPong, true, m.Payload)
				case WSClose:
					out, _ = AppendWSClose(out, m.CloseCode, m.CloseReason)
					_, err := conn.Write(out)
					done <- err
					return
				}
			}
			buf = buf[n:]
		}
		if len(out) > 0 {
			if _, err := conn.Write(out); err != nil {
				done <- err
				return
			}
		}
		if err := read(); err != nil {
			done <- err
			return
		}
	}
}

// TestWSGorillaEchoTCP runs gorilla's client against wsEchoServer over a
// loopback TCP connection: messages of all length encodings, fragmented
// text, pings, and a close handshake.
func TestWSGorillaEchoTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan error, 1)
	go wsEchoServer(ln, done)

	d := websocket.Dialer{WriteBufferSize: 512, HandshakeTimeout: time.Minute}
	ws, _, err := d.Dial("ws://"+ln.Addr().String()+"/echo", nil)
	require.NoError(t, err)
	defer ws.Close()
	pongs := make(chan string, 16)
	ws.SetPongHandler(func(s string) error { pongs <- s; return nil })

	for i, n := range []int{0, 1, 125, 126, 1000, 65535, 65536, 200000} {
		typ := websocket.BinaryMessage
		var data []byte
		if i%2 == 0 {
			typ = websocket.TextMessage
			// n bytes cut at a code point boundary, then cleaned.
			data = []byte(strings.ToValidUTF8(strings.Repeat("é€😀a", n/10+1)[:n], ""))
		} else {
			data = make([]byte, n)
			for j := range data {
				data[j] = byte(j * 7)
			}
		}
		require.NoError(t, ws.WriteMessage(typ, data))
		require.NoError(t, ws.WriteControl(websocket.PingMessage, []byte(fmt.Sprint("ping", i)), time.Time{}))
		gt, got, err := ws.ReadMessage()
		require.NoError(t, err, "message %d", i)
		assert.Equal(t, typ, gt)
		assert.Equal(t, data, got, "message %d (%d bytes)", i, n)
	}
	// The pongs are handled while ReadMessage reads; each one came before
	// the echo that follows it, so all but the last are in by now.
	require.GreaterOrEqual(t, len(pongs), 7)
	assert.Equal(t, "ping0", <-pongs)

	require.NoError(t, ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4321, "bye")))
	for {
		if _, _, err = ws.ReadMessage(); err != nil {
			break
		}
	}
	var ce *websocket.CloseError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, 4321, ce.Code)
	assert.Equal(t, "bye", ce.Text)
	require.NoError(t, <-done)
}

// TestWSGorillaProtocolErrorTCP: a client frame that breaks a rule gets a
// close frame with the rule's code from the echo server.
func TestWSGorillaProtocolErrorTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan error, 1)
	go wsEchoServer(ln, done)
	d := websocket.Dialer{HandshakeTimeout: time.Minute}
	ws, _, err := d.Dial("ws://"+ln.Addr().String()+"/echo", nil)
	require.NoError(t, err)
	defer ws.Close()
	// gorilla's client does not check the UTF-8 it sends.
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte("bad \xff")))
	_, _, err = ws.ReadMessage()
	var ce *websocket.CloseError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, int(WSCloseInvalidPayload), ce.Code)
	serr := <-done
	var we *WSError
	require.ErrorAs(t, serr, &we)
	assert.Equal(t, WSCloseInvalidPayload, we.Code)
}
