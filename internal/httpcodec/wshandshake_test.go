package httpcodec

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const wsUpgradeHead = "GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\n" +
	"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://example.com\r\n" +
	"Sec-WebSocket-Protocol: chat, superchat\r\nSec-WebSocket-Version: 13\r\n\r\n"

func parseHead(t *testing.T, head string) *Request {
	t.Helper()
	req, _, st := parseAll(Config{}, head)
	require.Equal(t, 0, st, "parse %q", head)
	return req
}

// TestWSAccept checks the example of RFC 6455 §1.3.
func TestWSAccept(t *testing.T) {
	got := AppendWSAccept([]byte("x"), []byte("dGhlIHNhbXBsZSBub25jZQ=="))
	assert.Equal(t, "xs3pPLMBiTxaQ9kYGzzhZRbK+xOo=", string(got))
	// A key too long for the stack buffer takes the other path.
	long := make([]byte, 100)
	assert.Len(t, AppendWSAccept(nil, long), WSAcceptLen)
}

func TestCheckWSUpgrade(t *testing.T) {
	req := parseHead(t, wsUpgradeHead)
	assert.True(t, IsWSUpgrade(req))
	key, err := CheckWSUpgrade(req)
	require.NoError(t, err)
	assert.Equal(t, "dGhlIHNhbXBsZSBub25jZQ==", string(key))

	proto, err := WSSelectProtocol(req, []string{"superchat", "chat"})
	require.NoError(t, err)
	assert.Equal(t, "chat", string(proto), "the client's preference wins")
	proto, err = WSSelectProtocol(req, []string{"other"})
	require.NoError(t, err)
	assert.Nil(t, proto)

	out, err := AppendWSUpgradeResponse(nil, key, proto)
	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n", string(out))
	out, err = AppendWSUpgradeResponse(nil, key, []byte("chat"))
	require.NoError(t, err)
	resp, _ := readStdlibResponse(t, out)
	assert.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	assert.Equal(t, "chat", resp.Header.Get("Sec-WebSocket-Protocol"))
	assert.Equal(t, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", resp.Header.Get("Sec-WebSocket-Accept"))
	_, err = AppendWSUpgradeResponse(nil, key, []byte("bad proto"))
	assert.ErrorIs(t, err, ErrInvalidHeader)

	assert.Equal(t, "Sec-WebSocket-Version: 13\r\n", string(AppendWSVersionHeader(nil)))

	assert.Zero(t, testing.AllocsPerRun(100, func() {
		k, _ := CheckWSUpgrade(req)
		p, _ := WSSelectProtocol(req, []string{"chat"})
		_, _ = AppendWSUpgradeResponse(out[:0], k, p)
	}))
}

func TestCheckWSUpgradeErrors(t *testing.T) {
	const base = "Host: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	cases := []struct {
		name, head string
		status     int
	}{
		{"case-insensitive tokens", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c, WebSocket\r\nConnection: keep-alive, UPGRADE\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", 0},
		{"POST", "POST / HTTP/1.1\r\n" + base + "Sec-WebSocket-Version: 13\r\n\r\n", 405},
		{"HTTP/1.0", "GET / HTTP/1.0\r\n" + base + "Sec-WebSocket-Version: 13\r\n\r\n", 400},
		{"no Upgrade", "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", 400},
		{"other Upgrade", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", 400},
		{"no Connection upgrade", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: keep-alive\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", 400},
		{"body", "GET / HTTP/1.1\r\n" + base + "Sec-WebSocket-Version: 13\r\nContent-Length: 1\r\n\r\n", 400},
		{"no version", "GET / HTTP/1.1\r\n" + base + "\r\n", 426},
		{"version 8", "GET / HTTP/1.1\r\n" + base + "Sec-WebSocket-Version: 8\r\n\r\n", 426},
		{"two versions", "GET / HTTP/1.1\r\n" + base + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Version: 13\r\n\r\n", 426},
		{"no key", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n", 400},
		{"two keys", "GET / HTTP/1.1\r\n" + base + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", 400},
		{"short key", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", 400},
		{"key not base64", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25j*Q==\r\nSec-WebSocket-Version: 13\r\n\r\n", 400},
		{"key unpadded 17 bytes", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=a\r\nSec-WebSocket-Version: 13\r\n\r\n", 400},
	}
	for _, c := range cases {
		req := parseHead(t, c.head)
		_, err := CheckWSUpgrade(req)
		if c.status == 0 {
			assert.NoError(t, err, c.name)
			continue
		}
		var e *Error
		require.ErrorAs(t, err, &e, c.name)
		assert.Equal(t, c.status, e.Status, c.name)
	}
}

func TestWSProtocolOffers(t *testing.T) {
	req := parseHead(t, "GET / HTTP/1.1\r\nHost: a\r\nSec-WebSocket-Protocol: a, b\r\nX: y\r\nsec-websocket-protocol:c\r\n\r\n")
	var got []string
	require.NoError(t, WSProtocolOffers(req, func(p []byte) bool { got = append(got, string(p)); return true }))
	assert.Equal(t, []string{"a", "b", "c"}, got)
	got = nil
	require.NoError(t, WSProtocolOffers(req, func(p []byte) bool { got = append(got, string(p)); return false }))
	assert.Equal(t, []string{"a"}, got)
	p, err := WSSelectProtocol(req, []string{"c"})
	require.NoError(t, err)
	assert.Equal(t, "c", string(p))
	p, err = WSSelectProtocol(req, []string{"A"})
	require.NoError(t, err)
	assert.Nil(t, p, "subprotocol names are case-sensitive")
	for _, bad := range []string{"a,", ", a", "a b", "", "a,,b", "a;b"} {
		req := parseHead(t, fmt.Sprintf("GET / HTTP/1.1\r\nHost: a\r\nSec-WebSocket-Protocol: %s\r\n\r\n", bad))
		_, err := WSSelectProtocol(req, []string{"a"})
		var e *Error
		require.ErrorAs(t, err, &e, "%q", bad)
		assert.Equal(t, 400, e.Status)
	}
}
