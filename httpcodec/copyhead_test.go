package httpcodec

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requestStrings renders every view of r, for comparing two copies.
func requestStrings(r *Request) []string {
	out := []string{string(r.Method), string(r.Target), string(r.Path), string(r.RawQuery), string(r.Host), string(r.Upgrade)}
	for _, v := range [][]byte{r.Method, r.Target, r.Path, r.RawQuery, r.Host, r.Upgrade} {
		if v == nil {
			out = append(out, "<nil>")
		} else {
			out = append(out, "set")
		}
	}
	for _, h := range r.Headers {
		out = append(out, string(h.Name)+": "+string(h.Value))
	}
	return out
}

// checkCopyHeadTo parses in and checks that CopyHeadTo gives what CopyTo gives, that the
// copy survives the input being clobbered, and that its views are capacity-limited.
func checkCopyHeadTo(t *testing.T, in []byte) {
	t.Helper()
	var p Parser
	var req Request
	n, err := p.ParseHead(in, &req)
	if err != nil {
		return
	}
	var want, got Request
	_ = req.CopyTo(&want, nil)
	arena := req.CopyHeadTo(&got, in[:n], make([]byte, 3, 8)) // a used prefix, too small
	wantS := requestStrings(&want)
	require.Equal(t, wantS, requestStrings(&got))
	require.Equal(t, "\x00\x00\x00", string(arena[:3]), "the arena's prefix is kept")
	g2 := got
	g2.Method, g2.Target, g2.Path, g2.RawQuery, g2.Host, g2.Upgrade, g2.Headers = nil, nil, nil, nil, nil, nil, nil
	w2 := want
	w2.Method, w2.Target, w2.Path, w2.RawQuery, w2.Host, w2.Upgrade, w2.Headers = nil, nil, nil, nil, nil, nil, nil
	require.Equal(t, w2, g2, "the other fields are copied as they are")
	for i := range in {
		in[i] = '#'
	}
	require.Equal(t, wantS, requestStrings(&got), "the copy refers to the input")
	for _, v := range [][]byte{got.Method, got.Target, got.Path, got.RawQuery, got.Host, got.Upgrade} {
		require.Equal(t, len(v), cap(v), "a view is not capacity-limited")
	}
	for _, h := range got.Headers {
		require.Equal(t, len(h.Name), cap(h.Name))
		require.Equal(t, len(h.Value), cap(h.Value))
	}
}

// TestCopyHeadTo: CopyHeadTo agrees with CopyTo on heads with and without a query, an
// absolute target, leading empty lines, Upgrade, many headers, and with bytes after the
// head; it does not allocate when the arena and Headers have room; views outside head
// make it fall back to CopyTo.
func TestCopyHeadTo(t *testing.T) {
	for _, s := range []string{
		"GET http://h/p?q=1 HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nX: y\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"\r\n\r\nGET /x?y HTTP/1.1\r\nHost: z\r\n\r\nGET /next HTTP/1.1\r\n\r\n",
		"POST /a/b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nX-Empty:\r\nA: 1\r\nB:  2 \r\n\r\nabc",
	} {
		checkCopyHeadTo(t, []byte(s))
	}

	in := []byte("GET /p?q HTTP/1.1\r\nHost: h\r\nX: y\r\n\r\n")
	var p Parser
	var req Request
	n, err := p.ParseHead(in, &req)
	require.NoError(t, err)
	var dst Request
	dst.Headers = make([]Header, 0, 8)
	arena := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(10, func() { arena = req.CopyHeadTo(&dst, in[:n], arena[:0]) })
	assert.Zero(t, allocs)
	assert.Len(t, arena, n, "one copy of the head")

	// A view outside head: CopyTo's copy, view by view.
	other := []byte("elsewhere")
	req.Headers[1].Value = other
	arena = req.CopyHeadTo(&dst, in[:n], nil)
	assert.Equal(t, "elsewhere", string(dst.Headers[1].Value))
	other[0] = '#'
	assert.Equal(t, "elsewhere", string(dst.Headers[1].Value))
	assert.NotContains(t, string(arena), "\r\n", "the fallback copies views, not the head")
	// A view reaching past head's end, and an empty head.
	req.Headers[1].Value = in[n-3 : n]
	_ = req.CopyHeadTo(&dst, in[:n-1], nil)
	assert.Equal(t, string(in[n-3:n]), string(dst.Headers[1].Value))
	_ = req.CopyHeadTo(&dst, nil, nil)
	assert.Equal(t, "/p", string(dst.Path))

	// Onto itself.
	req3, _, _ := parseAll(Config{}, "GET /x HTTP/1.1\r\nHost: z\r\n\r\n")
	buf := []byte("GET /x HTTP/1.1\r\nHost: z\r\n\r\n")
	var p3 Parser
	n3, err := p3.ParseHead(buf, req3)
	require.NoError(t, err)
	req3.CopyHeadTo(req3, buf[:n3], nil)
	buf[5] = '#'
	assert.Equal(t, "/x", string(req3.Path))
	assert.Equal(t, "z", string(req3.Headers[0].Value))
}

// FuzzCopyHeadTo: for any input ParseHead accepts, CopyHeadTo gives what CopyTo gives.
func FuzzCopyHeadTo(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://h/p?q=1 HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n",
		"\r\nPOST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkCopyHeadTo(t, bytes.Clone(in))
	})
}
