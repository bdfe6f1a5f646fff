package ws

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
)

// TestWSFrameSplitAcrossReads: a frame whose bytes arrive in pieces, none of which holds a
// whole frame, is read whole. The engine once dropped every buffered byte when the
// protocol consumed none of a read (gnet's Discard(0) discards all): the server then
// misread the rest of the stream and closed with 1002 ("reserved bits set"), as a
// 1 MiB message of 4 KiB fragments did under load. The pauses make the pieces arrive in
// separate reads (the case under test); were two coalesced, the test would still pass.
func TestWSFrameSplitAcrossReads(t *testing.T) {
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) { s.Handle("GET /ws", wsEcho(nil)) })
	for _, size := range []int{100, 1000, 70_000} {
		r := wsRawDial(t, addr, "/ws")
		key := []byte{9, 8, 7, 6}
		p := bytes.Repeat([]byte("abcdefgh"), size/8)
		hdr, _ := httpcodec.AppendWSFrameHeader(nil, httpcodec.WSText, true, len(p))
		hdr[1] |= 0x80                             // masked, as a client's
		frame := append(hdr, maskBytes(key, p)...) // the key, then the masked payload
		// The header alone, then two pieces of the payload, then the rest.
		for _, cut := range [][2]int{{0, 1}, {1, len(hdr) + 4}, {len(hdr) + 4, len(hdr) + 4 + size/3}, {len(hdr) + 4 + size/3, len(frame)}} {
			r.write(t, frame[cut[0]:cut[1]])
			time.Sleep(20 * time.Millisecond)
		}
		op, got, _ := r.readFrame(t)
		require.Equal(t, httpcodec.WSText, op, "size %d: the server closed instead of echoing: %q", size, got)
		require.True(t, bytes.Equal(p, got), "size %d: echo differs", size)
	}
}
