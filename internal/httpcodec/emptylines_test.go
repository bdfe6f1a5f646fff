package httpcodec

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLeadingEmptyLines checks that up to MaxLeadingEmptyLines CRLFs before
// a request line are skipped and counted in the head length, whole, split
// at every byte, and byte by byte in one growing buffer.
func TestLeadingEmptyLines(t *testing.T) {
	const head = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n"
	for k := 0; k <= MaxLeadingEmptyLines; k++ {
		in := strings.Repeat("\r\n", k) + head
		req, n, st := parseAll(Config{}, in)
		require.Equal(t, 0, st, "%d empty lines", k)
		require.Equal(t, len(in), n)
		assert.Equal(t, len(in), req.HeadLen)
		assert.Equal(t, "GET", string(req.Method))
		assert.Equal(t, "/x", string(req.Target))
		assert.Equal(t, "a", string(req.Host))
		for cut := 1; cut < len(in); cut++ {
			rs, ns, sts := parseSplit(Config{}, in, cut)
			require.Equal(t, 0, sts, "%d empty lines, split at %d", k, cut)
			require.Equal(t, len(in), ns)
			assert.Equal(t, "/x", string(rs.Target))
			assert.Equal(t, "a", string(rs.Host))
		}
		var p Parser
		var r Request
		var buf []byte
		for i := 0; i < len(in); i++ {
			buf = append(buf, in[i])
			nb, err := p.ParseHead(buf, &r)
			if i < len(in)-1 {
				require.ErrorIs(t, err, ErrNeedMore, "%d empty lines, byte %d", k, i)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, len(in), nb)
			assert.Equal(t, "/x", string(r.Target))
		}
	}
}

// TestLeadingEmptyLinesBound checks that a stream of only CRLFs waits for
// at most MaxLeadingEmptyLines of them and the next one is a 400, however
// it arrives.
func TestLeadingEmptyLinesBound(t *testing.T) {
	only := strings.Repeat("\r\n", MaxLeadingEmptyLines)
	_, _, st := parseAll(Config{}, only)
	require.Equal(t, -1, st, "only %d CRLFs must wait", MaxLeadingEmptyLines)
	_, _, st = parseAll(Config{}, only+"\r")
	require.Equal(t, 400, st)
	in := only + "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"
	for cut := 1; cut < len(in); cut++ {
		_, _, sts := parseSplit(Config{}, in, cut)
		require.Equal(t, 400, sts, "split at %d", cut)
	}
	// Byte by byte: the error comes on the first byte of the extra line,
	// so the buffer never holds more than 2*MaxLeadingEmptyLines+1 bytes.
	var p Parser
	var r Request
	var buf []byte
	for i := 0; ; i++ {
		buf = append(buf, in[i])
		_, err := p.ParseHead(buf, &r)
		if i < 2*MaxLeadingEmptyLines {
			require.ErrorIs(t, err, ErrNeedMore, "byte %d", i)
			continue
		}
		require.Equal(t, 400, statusOf(err))
		assert.Contains(t, err.Error(), "empty lines")
		break
	}
	// The parser is ready for a new connection's bytes after the error.
	_, err := p.ParseHead([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), &r)
	require.NoError(t, err)
}

// TestPipeliningEmptyLineAfterBody checks the case RFC 9112 §2.2 is about:
// a client that ends a POST body with an extra CRLF, then pipelines more
// requests.
func TestPipeliningEmptyLineAfterBody(t *testing.T) {
	reqs := []string{
		"POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
		"\r\nPOST /2 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"\r\n\r\nGET /3 HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /4 HTTP/1.1\r\nHost: a\r\n\r\n",
	}
	bodies := []string{"hello", "abc", "", ""}
	all := []byte(strings.Join(reqs, ""))
	var p Parser
	var req Request
	var d BodyDecoder
	off := 0
	for i := range reqs {
		n, err := p.ParseHead(all[off:], &req)
		require.NoError(t, err, "request %d", i)
		assert.Equal(t, "/"+string(rune('1'+i)), string(req.Target))
		off += n
		d.Init(&req, Config{})
		m, body, done, err := d.Decode(all[off:], nil)
		require.NoError(t, err)
		require.True(t, done)
		assert.Equal(t, bodies[i], string(body))
		off += m
		require.Equal(t, len(strings.Join(reqs[:i+1], "")), off, "request %d end", i)
	}
	// Every split of the stream between the first and second request.
	first := len(reqs[0])
	rest := string(all[first:])
	for cut := 1; cut < len(reqs[1]); cut++ {
		r, n, st := parseSplit(Config{}, rest, cut)
		require.Equal(t, 0, st, "split at %d", cut)
		assert.Equal(t, "/2", string(r.Target))
		assert.Equal(t, strings.Index(reqs[1], "3\r\nabc"), n)
	}
}
