package ws

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
)

// pythonClient is a client run by Python's websockets (its asyncio API, 10.x and later):
// it sends JSON game states, a fragmented text message, a binary message, an empty one and
// 1500 random bytes twice over, and checks each echo; it prints the extension the server
// accepted and how many frames came compressed.
const pythonClient = `
import asyncio, json, os, sys
import websockets
from websockets.extensions import permessage_deflate
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory

compressed = 0  # frames from the server with RSV1
decode = permessage_deflate.PerMessageDeflate.decode
def counting_decode(self, frame, *, max_size=None):
    global compressed
    if frame.rsv1:
        compressed += 1
    return decode(self, frame, max_size=max_size)
permessage_deflate.PerMessageDeflate.decode = counting_decode

def state(t):
    return json.dumps({"tick": t, "players": [{"id": "player-%d" % i, "x": 100 + t * 3 + i, "y": 200 - t,
        "hp": 100 - (t + i) % 40, "weapon": "blaster", "buffs": ["speed", "shield"]} for i in range(4)]})

async def main(uri, window):
    ext = [ClientPerMessageDeflateFactory(client_max_window_bits=True, server_max_window_bits=window)]
    async with websockets.connect(uri, extensions=ext, compression=None, max_size=1 << 22) as ws:
        print("EXT", ws.response_headers.get("Sec-WebSocket-Extensions"), flush=True)
        for t in range(40):
            m = state(t)
            await ws.send(m)
            got = await ws.recv()
            assert got == m, (t, got[:80])
        parts = [state(t) for t in range(50)]
        await ws.send(iter(parts))  # one message in 50 frames
        got = await ws.recv()
        assert got == "".join(parts), "fragmented"
        b = bytes(range(256)) * 64
        await ws.send(b)
        assert await ws.recv() == b, "binary"
        await ws.send("")
        assert await ws.recv() == "", "empty"
        r = os.urandom(1500)
        await ws.send(r + r)  # its best match is 1500 bytes back
        assert await ws.recv() == r + r, "repeat"
    print("COMPRESSED", compressed, flush=True)
    print("OK", flush=True)

window = int(sys.argv[2]) if len(sys.argv) > 2 else None
asyncio.run(asyncio.wait_for(main(sys.argv[1], window), 30))
`

// pythonWithWebsockets returns a Python that has the websockets package, or skips.
func pythonWithWebsockets(t *testing.T) string {
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(py); err == nil && exec.Command(path, "-c", "import websockets").Run() == nil {
			return path
		}
	}
	t.Skip("Python's websockets library is not installed (Debian: apt-get install python3-websockets; .ci/run installs it)")
	return ""
}

// TestDeflatePython: Python's websockets library (zlib underneath) with permessage-deflate
// against the server, without and with context takeover, and with the server's window
// limited to 2^10 (zlib refuses a reference past it, "invalid distance too far back"):
// every message round-trips, a fragmented one included, and comes compressed.
func TestDeflatePython(t *testing.T) {
	py := pythonWithWebsockets(t)
	script := filepath.Join(t.TempDir(), "client.py")
	require.NoError(t, os.WriteFile(script, []byte(pythonClient), 0o600))
	_, addr := startWS(t, loop.Config{}, Config{}, func(s *loop.Server) {
		s.Handle("GET /plain", deflateEcho(steady(Config{Compression: true})))
		s.Handle("GET /take", deflateEcho(steady(Config{Compression: true, CompressionContextTakeover: true})))
	})
	for _, tc := range []struct {
		path, window, ext string
		compressed        string // frames from the server with RSV1
	}{
		// The 40 states, the fragmented message, the binary one and the repeat.
		{"/plain", "", "permessage-deflate; server_no_context_takeover; client_no_context_takeover", "43"},
		{"/take", "", "permessage-deflate", "43"},
		// The fragmented and binary messages are longer than the 1 KiB window: compressed
		// within it; the repeat's match is out of its reach: plain.
		{"/take", "10", "permessage-deflate; server_max_window_bits=10", "42"},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/")+tc.window, func(t *testing.T) {
			args := []string{script, "ws://" + addr + tc.path}
			if tc.window != "" {
				args = append(args, tc.window)
			}
			cmd := exec.Command(py, args...)
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "python client:\n%s", out)
			require.Contains(t, string(out), "EXT "+tc.ext+"\n")
			require.Contains(t, string(out), "OK\n")
			require.Contains(t, string(out), "COMPRESSED "+tc.compressed+"\n")
		})
	}
}
