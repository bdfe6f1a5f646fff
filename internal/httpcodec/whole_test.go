package httpcodec

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wholeSeeds are heads of the shape parseWhole takes, and near misses of it.
var wholeSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /p?q=1&r HTTP/1.0\r\n\r\n",
	"GET /p%2Fx? HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
	"GET /p%2 HTTP/1.1\r\nHost: a\r\n\r\n",
	"HEAD /x HTTP/1.1\r\nHost: a\r\nX:  v \t\r\nY:\r\n\r\n",
	"DELETE /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nExpect: 100-continue\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
	"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a b\r\n\r\n",
	"GET /x HTTP/1.1\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nExpect: bogus\r\n\r\n",
	"GET /chat HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\n X: folded\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nX : y\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nX: y\nZ: w\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nX: y\rZ: w\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\x7f\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\n\r",
	"GET /x HTTP/1.1\r\nHost: a\r\n",
	"GET /x HTTP/1.1\r\nHost: a",
	"GET /x HTTP/1.1\r",
	"GET /x HTTP/1.2\r\nHost: a\r\n\r\n",
	"GET /x HTTP/2.0\r\nHost: a\r\n\r\n",
	"GET /x  HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /x HTTP/1.1 \r\nHost: a\r\n\r\n",
	"GET x HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECTX /x HTTP/1.1\r\nHost: a\r\n\r\n",
	"G\x01T /x HTTP/1.1\r\nHost: a\r\n\r\n",
	" GET /x HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET\t/x HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /x\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /0123456789012345678901234567890123456789 HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nA: 0123456789012345678901234567890123456789012345678901234567890123456789\r\n\r\n",
	// The path's word-at-a-time scan: '?', '%' and bad bytes in and past its first word,
	// and the value's: tabs, DEL and controls before and after the first word.
	"GET /abcdefgh?x%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /abcdefghij%4 HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /abcdefghij%41?%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a?b?c%2 HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /abcdefghijk\x80 HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /abcdefghijk\x7e~ HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /abcdef\xff HTTP/1.1\r\nHost: a\r\n\r\n",
	"GETX /x HTTP/1.1\r\nHost: a\r\n\r\n",
	"get /x HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nX: a\tb\tc\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nX: abcdefghijkl\tmnop\x00\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nX: \x7fabcdefgh\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nX: abcdefgh\x7f\r\n\r\n",
	"GET /x HTTP/1.1\r\nHost: a\r\nX: abcdefgh\xc3\xa9ijklmnop\r\n\r\n",
}

// FuzzParseWhole is the fast path's differential test: whatever parseWhole accepts, the
// general path (parseHead) accepts with the same result; whatever it declines leaves the
// Parser as fresh as before, so that ParseHead then answers as the general path does.
func FuzzParseWhole(f *testing.F) {
	addHeadSeeds(f)
	for _, in := range wholeSeeds {
		for sel := range uint8(len(fuzzConfigs)) {
			f.Add([]byte(in), sel)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, sel uint8) {
		cfg := fuzzConfigs[int(sel)%len(fuzzConfigs)]
		var general Parser
		general.Init(cfg)
		var rg Request
		ng, errg := general.parseHead(bytes.Clone(data), &rg)
		want := headSummary(ng, errg, &rg)

		var fast Parser
		fast.Init(cfg)
		rf := Request{Headers: make([]Header, 0, 2)}
		nf, ok := fast.parseWhole(data, &rf)
		if ok {
			require.NoError(t, errg, "the fast path accepted what the general path rejects")
			require.Equal(t, want, headSummary(nf, nil, &rf))
			checkViews(t, data, &rf, cfg)
		}
		// The request line's fields are written before use on either path; the progress
		// and the fields' findings must be as Reset leaves them.
		left := fast
		left.methodEnd, left.targetBeg, left.targetEnd, left.pathBeg, left.pathEnd, left.queryBeg, left.form, left.protoMinor = 0, 0, 0, 0, 0, 0, 0, 0
		require.Equal(t, *NewParser(cfg), left, "the fast path left state behind")
		// ParseHead (either path) on the same Parser and Request answers as the general path.
		n, err := fast.ParseHead(data, &rf)
		require.Equal(t, want, headSummary(n, err, &rf))
	})
}

// TestParseWholeTakesTheCommonShape: the fast path takes the common heads (or the
// benchmark would measure the general path) and declines a head split across reads.
func TestParseWholeTakesTheCommonShape(t *testing.T) {
	for _, in := range []string{wholeSeeds[0], wholeSeeds[1], wholeSeeds[2], wholeSeeds[5], string(benchGET), string(benchPOST)} {
		p := NewParser(Config{})
		var r Request
		n, ok := p.parseWhole([]byte(in), &r)
		assert.True(t, ok, "%q", in)
		assert.Positive(t, n)
	}
	for _, in := range []string{wholeSeeds[22], wholeSeeds[23], "\r\n" + wholeSeeds[0], "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"} {
		p := NewParser(Config{})
		var r Request
		_, ok := p.parseWhole([]byte(in), &r)
		assert.False(t, ok, "%q", in)
	}
}

// BenchmarkParseWrkGET parses the head wrk sends (a request line and Host), the
// pipelined benchmark's request.
func BenchmarkParseWrkGET(b *testing.B) {
	benchParse(b, []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"))
}

// TestWordScansFindTheFirstByte binds the word-at-a-time scans to their byte tables: for
// every byte value at every place of two words, behind plain bytes and behind another
// odd byte, pathPrefix stops where a byte loop over isPathChar stops, and ctlBits' lowest
// flagged byte is the first that is not a plain value byte (isValueChar less tab).
func TestWordScansFindTheFirstByte(t *testing.T) {
	for _, fill := range []byte{'a', '~', '!'} {
		for c := range 256 {
			for k := range 16 {
				for _, later := range []int{-1, k + 1, k + 7} {
					b := bytes.Repeat([]byte{fill}, 16)
					b[k] = byte(c)
					if later >= 0 && later < len(b) {
						b[later] = 0 // a second stop behind the first
					}
					want := 0
					for want < len(b) && isPathChar[b[want]] {
						want++
					}
					require.Equal(t, want, pathPrefix(b), "%q", b)

					x := binary.LittleEndian.Uint64(b[k&^7:])
					first := 8
					for i, v := range b[k&^7 : k&^7+8] {
						if !isValueChar[v] || v == '\t' {
							first = i
							break
						}
					}
					got := 8
					if m := ctlBits(x); m != 0 {
						got = bits.TrailingZeros64(m) >> 3
					}
					require.Equal(t, first, got, "%q", b[k&^7:k&^7+8])
				}
			}
		}
	}
}
