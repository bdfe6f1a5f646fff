package httpcodec

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAppendResponseHeadEnd: a start made once by AppendResponseHead (ContentLength -1, no
// Chunked, Close or KeepAlive10; its final CRLF removed) followed by AppendResponseHeadEnd
// writes what AppendResponseHead writes, for every status class and framing.
func TestAppendResponseHeadEnd(t *testing.T) {
	date := []byte("Tue, 11 Jun 2024 09:30:00 GMT")
	heads := [][]Header{nil, {hdr("Content-Type", "text/plain; charset=utf-8")}, {hdr("X-A", "1"), hdr("Set-Cookie", "b=2")}}
	for _, status := range []int{100, 101, 200, 201, 204, 206, 304, 404, 500, 599} {
		for _, hs := range heads {
			for _, d := range [][]byte{nil, date} {
				startHead := ResponseHead{Status: status, Headers: hs, ContentLength: -1, Date: d}
				start, err := AppendResponseHead(nil, &startHead)
				require.NoError(t, err)
				require.True(t, bytes.HasSuffix(start, []byte("\r\n\r\n")))
				start = start[:len(start)-2]
				for _, cl := range []int64{-1, 0, 13, 1 << 40} {
					for flags := range 8 {
						h := ResponseHead{Status: status, Headers: hs, ContentLength: cl, Date: d,
							Chunked: flags&1 != 0, Close: flags&2 != 0, KeepAlive10: flags&4 != 0}
						want, err := AppendResponseHead([]byte("x"), &h)
						require.NoError(t, err)
						got := AppendResponseHeadEnd(append([]byte("x"), start...), h.Status, h.ContentLength, h.Chunked, h.Close, h.KeepAlive10)
						assert.Equal(t, string(want), string(got), "status %d, headers %v, cl %d, flags %d", status, hs, cl, flags)
					}
				}
			}
		}
	}
}

// TestCopyToItself: CopyTo with dst == r moves every view into the arena; clobbering the
// parsed buffer afterwards changes nothing.
func TestCopyToItself(t *testing.T) {
	in := []byte("GET http://h/p%20q?q=1 HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nX: y\r\n\r\n")
	var p Parser
	var req Request
	_, err := p.ParseHead(in, &req)
	require.NoError(t, err)
	wantStr := func(r *Request) []string {
		out := []string{string(r.Method), string(r.Target), string(r.Path), string(r.RawQuery), string(r.Host), string(r.Upgrade),
			strconv.Itoa(r.ProtoMinor), strconv.FormatInt(r.ContentLength, 10), strconv.FormatBool(r.KeepAlive), strconv.Itoa(r.HeadLen)}
		for _, h := range r.Headers {
			out = append(out, string(h.Name), string(h.Value))
		}
		return out
	}
	before := wantStr(&req)
	arena := req.CopyTo(&req, make([]byte, 0, 8)) // too small: grown once
	for i := range in {
		in[i] = '#'
	}
	assert.Equal(t, before, wantStr(&req))
	assert.Nil(t, (&Request{}).CopyTo(&Request{}, nil), "nothing to copy: the arena stays nil")
	require.NotEmpty(t, arena)
	_ = append(req.Method, "XXXX"...)
	assert.Equal(t, "http://h/p%20q?q=1", string(req.Target), "copied views are capacity-limited")
}

// TestAppendLength: the digit-by-digit decimal of small lengths is strconv's, at every
// boundary of its cases and beyond them.
func TestAppendLength(t *testing.T) {
	for _, n := range []uint64{0, 1, 9, 10, 13, 99, 100, 101, 999, 1000, 1234, 9999, 10000, 65535, 1<<63 - 1, 1<<64 - 1} {
		require.Equal(t, "x"+strconv.FormatUint(n, 10), string(appendLength([]byte("x"), n)), "%d", n)
	}
	for n := range uint64(20000) {
		require.Equal(t, strconv.FormatUint(n, 10), string(appendLength(nil, n)))
	}
}
