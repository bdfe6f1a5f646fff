package httpcodec

import (
	"fmt"
	"strings"
	"testing"
)

// decodeAll runs a fresh decoder for req over in, fed in pieces of the given
// sizes (the rest in one piece), and returns the body, trailers as
// "Name: Value" lines, the bytes consumed, whether it is done, and the
// error status (0 if none).
func decodeAll(req *Request, cfg Config, in string, pieces ...int) (body string, trailers []string, consumed int, done bool, status int) {
	var d BodyDecoder
	d.Init(req, cfg)
	var out []byte
	src := []byte(in)
	feed := func(chunk []byte) bool {
		n, o, dn, err := d.Decode(chunk, out)
		out = o
		consumed += n
		done = dn
		if n > len(chunk) || n < 0 {
			panic("consumed out of range")
		}
		if err != nil {
			status = statusOf(err)
			return false
		}
		return !dn
	}
	off := 0
	for _, k := range pieces {
		if off+k > len(src) {
			break
		}
		// Only the unconsumed bytes are fed again, as a real caller would.
		if !feed(src[consumed : off+k]) {
			return string(out), hdrLines(d.Trailers()), consumed, done, status
		}
		off += k
	}
	feed(src[consumed:])
	return string(out), hdrLines(d.Trailers()), consumed, done, status
}

func hdrLines(hs []Header) []string {
	var s []string
	for _, h := range hs {
		s = append(s, string(h.Name)+": "+string(h.Value))
	}
	return s
}

var chunkedReq = &Request{Chunked: true, ContentLength: -1}

func TestBodyContentLength(t *testing.T) {
	req := &Request{ContentLength: 5}
	body, _, n, done, st := decodeAll(req, Config{}, "helloGET / HTTP/1.1\r\n")
	if body != "hello" || n != 5 || !done || st != 0 {
		t.Fatalf("got %q %d %v %d", body, n, done, st)
	}
	body, _, n, done, st = decodeAll(req, Config{}, "hel")
	if body != "hel" || n != 3 || done || st != 0 {
		t.Fatalf("partial: got %q %d %v %d", body, n, done, st)
	}
	for k := 0; k <= 5; k++ {
		body, _, n, done, _ = decodeAll(req, Config{}, "hello!", k)
		if body != "hello" || n != 5 || !done {
			t.Fatalf("split %d: got %q %d %v", k, body, n, done)
		}
	}
	// No body: done at once, nothing consumed.
	for _, r := range []*Request{{ContentLength: -1}, {ContentLength: 0}} {
		body, _, n, done, st = decodeAll(r, Config{}, "GET / HTTP/1.1\r\n")
		if body != "" || n != 0 || !done || st != 0 {
			t.Fatalf("no body: got %q %d %v %d", body, n, done, st)
		}
	}
	// Over the limit.
	_, _, n, done, st = decodeAll(&Request{ContentLength: 11}, Config{MaxBodyBytes: 10}, "0123456789a")
	if st != 413 || n != 0 || done {
		t.Fatalf("over limit: %d %v %d", n, done, st)
	}
	var d BodyDecoder
	if !d.Done() {
		t.Fatal("zero BodyDecoder must be done")
	}
}

func TestBodyChunkedValid(t *testing.T) {
	tests := []struct {
		name, in, body string
		trailers       []string
	}{
		{"simple", "5\r\nhello\r\n0\r\n\r\n", "hello", nil},
		{"several", "3\r\nabc\r\n1\r\nd\r\n0\r\n\r\n", "abcd", nil},
		{"empty body", "0\r\n\r\n", "", nil},
		{"hex upper and lower", "A\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n", "01234567890123456789", nil},
		{"leading zeros", "0005\r\nhello\r\n000\r\n\r\n", "hello", nil},
		{"16 digits", "0000000000000005\r\nhello\r\n0\r\n\r\n", "hello", nil},
		{"extension", "5;name\r\nhello\r\n0;last\r\n\r\n", "hello", nil},
		{"extension value", "5;a=b;c=d\r\nhello\r\n0\r\n\r\n", "hello", nil},
		{"extension quoted", "5;a=\"b c;\\\"d\"\r\nhello\r\n0\r\n\r\n", "hello", nil},
		{"extension BWS", "5; a = b \t; c\r\nhello\r\n0\r\n\r\n", "hello", nil},
		{"extension quoted then BWS", "5;a=\"x\" ;b\r\nhello\r\n0\r\n\r\n", "hello", nil},
		{"trailers", "5\r\nhello\r\n0\r\nX-Sum: abc \r\nx-other:\t1\r\n\r\n", "hello", []string{"X-Sum: abc", "x-other: 1"}},
		{"body with CRLF inside", "4\r\n\r\n\r\n\r\n0\r\n\r\n", "\r\n\r\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in + "NEXT"
			body, tr, n, done, st := decodeAll(chunkedReq, Config{}, in)
			if st != 0 || !done || body != tt.body || n != len(tt.in) || strings.Join(tr, "\n") != strings.Join(tt.trailers, "\n") {
				t.Fatalf("got %q %q consumed %d done %v status %d", body, tr, n, done, st)
			}
			for k := 0; k <= len(tt.in); k++ {
				for _, pieces := range [][]int{{k}, {k, 1, 1, 1}, {1, k}} {
					body, tr, n, done, st := decodeAll(chunkedReq, Config{}, in, pieces...)
					if st != 0 || !done || body != tt.body || n != len(tt.in) || strings.Join(tr, "\n") != strings.Join(tt.trailers, "\n") {
						t.Fatalf("pieces %v: got %q %q consumed %d done %v status %d", pieces, body, tr, n, done, st)
					}
				}
			}
		})
	}
}

var chunkedErrorCases = []struct {
	name   string
	cfg    Config
	in     string
	status int
}{
	{"empty size", Config{}, "\r\nhello\r\n0\r\n\r\n", 400},
	{"non-hex size", Config{}, "g\r\n", 400},
	{"negative size", Config{}, "-5\r\nhello\r\n0\r\n\r\n", 400},
	{"0x prefix", Config{}, "0x5\r\nhello\r\n0\r\n\r\n", 400},
	{"17 digits", Config{}, "00000000000000005\r\nhello\r\n0\r\n\r\n", 400},
	{"size overflow", Config{MaxBodyBytes: 1 << 62}, "ffffffffffffffff\r\n", 413},
	{"space inside size", Config{}, "1 0\r\n", 400},
	{"trailing whitespace", Config{}, "5 \r\nhello\r\n0\r\n\r\n", 400},
	{"whitespace before extension", Config{}, "5 ;a\r\nhello\r\n0\r\n\r\n", 400},
	{"leading whitespace", Config{}, " 5\r\nhello\r\n0\r\n\r\n", 400},
	{"bare LF after size", Config{}, "5\nhello\r\n0\r\n\r\n", 400},
	{"CR without LF after size", Config{}, "5\rhello\r\n", 400},
	{"missing CRLF after data", Config{}, "5\r\nhelloX\r\n0\r\n\r\n", 400},
	{"LF only after data", Config{}, "5\r\nhello\n0\r\n\r\n", 400},
	{"data longer than size", Config{}, "3\r\nhello\r\n0\r\n\r\n", 400},
	{"bad extension name", Config{}, "5;=x\r\nhello\r\n", 400},
	{"extension no name", Config{}, "5;\r\nhello\r\n", 400},
	{"extension bad value", Config{}, "5;a=\r\nhello\r\n", 400},
	{"extension value then space", Config{}, "5;a=b \r\nhello\r\n", 400},
	{"extension name then space", Config{}, "5;a \r\nhello\r\n", 400},
	{"extension unterminated quote", Config{}, "5;a=\"b\r\nhello\r\n", 400},
	{"extension control", Config{}, "5;a\x01\r\nhello\r\n", 400},
	{"extension bare CR in quote", Config{}, "5;a=\"\r\"\r\nhello\r\n", 400},
	{"chunk line too long", Config{}, "5;" + strings.Repeat("a", 4096) + "\r\nhello\r\n", 400},
	{"chunk line limit", Config{MaxChunkLineBytes: 8}, "5;abcdef\r\nhello\r\n", 400},
	{"bare LF in trailer", Config{}, "0\r\nX: y\n\r\n", 400},
	{"bare LF ending trailers", Config{}, "0\r\n\n", 400},
	{"trailer obs-fold", Config{}, "0\r\nX: y\r\n z\r\n\r\n", 400},
	{"trailer no colon", Config{}, "0\r\nXY\r\n\r\n", 400},
	{"trailer space before colon", Config{}, "0\r\nX : y\r\n\r\n", 400},
	{"trailer empty name", Config{}, "0\r\n: y\r\n\r\n", 400},
	{"trailer NUL", Config{}, "0\r\nX: a\x00\r\n\r\n", 400},
	{"trailer bare CR", Config{}, "0\r\nX: a\rb\r\n\r\n", 400},
	{"trailers too large", Config{MaxHeaderBytes: 16}, "0\r\nX-Long: 0123456789\r\n\r\n", 431},
	{"too many trailers", Config{MaxHeaderCount: 1}, "0\r\nA: 1\r\nB: 2\r\n\r\n", 431},
	{"body over limit in one chunk", Config{MaxBodyBytes: 10}, "b\r\n", 413},
	{"body over limit across chunks", Config{MaxBodyBytes: 10}, "5\r\nhello\r\n6\r\n", 413},
	{"too much overhead", Config{}, strings.Repeat("1;"+strings.Repeat("e", 200)+"\r\nx\r\n", 100), 400},
}

func TestBodyChunkedErrors(t *testing.T) {
	for _, tt := range chunkedErrorCases {
		t.Run(tt.name, func(t *testing.T) {
			_, _, n, done, st := decodeAll(chunkedReq, tt.cfg, tt.in)
			if st != tt.status || done || n > len(tt.in) {
				t.Fatalf("status %d done %v consumed %d, want status %d", st, done, n, tt.status)
			}
			step := 1
			if len(tt.in) > 2000 {
				step = 131
			}
			for k := 0; k <= len(tt.in); k += step {
				if _, _, _, _, st := decodeAll(chunkedReq, tt.cfg, tt.in, k, 1); st != tt.status {
					t.Fatalf("split %d: status %d, want %d", k, st, tt.status)
				}
			}
		})
	}
}

func TestBodyChunkedLimitExact(t *testing.T) {
	cfg := Config{MaxBodyBytes: 10}
	in := "5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n"
	body, _, n, done, st := decodeAll(chunkedReq, cfg, in)
	if body != "helloworld" || n != len(in) || !done || st != 0 {
		t.Fatalf("got %q %d %v %d", body, n, done, st)
	}
}

func TestBodyChunkedOverheadAllowed(t *testing.T) {
	// One byte per chunk is legitimate streaming and stays within the
	// overhead allowance; so do moderate extensions on real data.
	var sb strings.Builder
	for range 5000 {
		sb.WriteString("1\r\nx\r\n")
	}
	for range 100 {
		fmt.Fprintf(&sb, "40;ext=%s\r\n%s\r\n", strings.Repeat("v", 100), strings.Repeat("y", 64))
	}
	sb.WriteString("0\r\n\r\n")
	body, _, n, done, st := decodeAll(chunkedReq, Config{}, sb.String())
	if st != 0 || !done || n != sb.Len() || len(body) != 5000+6400 {
		t.Fatalf("status %d done %v n %d body %d", st, done, n, len(body))
	}
}

func TestBodyStickyError(t *testing.T) {
	var d BodyDecoder
	d.Init(chunkedReq, Config{})
	_, _, _, err := d.Decode([]byte("z\r\n"), nil)
	if statusOf(err) != 400 {
		t.Fatal(err)
	}
	n, _, done, err2 := d.Decode([]byte("5\r\nhello\r\n0\r\n\r\n"), nil)
	if err2 != err || n != 0 || done {
		t.Fatal("error is not sticky")
	}
	// Init clears it.
	d.Init(chunkedReq, Config{})
	if _, out, done, err := d.Decode([]byte("0\r\n\r\n"), nil); err != nil || !done || len(out) != 0 {
		t.Fatal(err)
	}
	// Decode after done consumes nothing.
	if n, _, done, err := d.Decode([]byte("GET"), nil); n != 0 || !done || err != nil {
		t.Fatal(n, done, err)
	}
}

func TestBodyTrailersOwned(t *testing.T) {
	var d BodyDecoder
	d.Init(chunkedReq, Config{})
	src := []byte("0\r\nX-A: 1\r\nX-B: 2\r\n\r\n")
	if _, _, done, err := d.Decode(src, nil); err != nil || !done {
		t.Fatal(err)
	}
	for i := range src {
		src[i] = '#'
	}
	tr := hdrLines(d.Trailers())
	if strings.Join(tr, ",") != "X-A: 1,X-B: 2" {
		t.Fatalf("trailers %q", tr)
	}
	d.Init(chunkedReq, Config{})
	if d.Trailers() != nil {
		t.Fatal("trailers survive Init")
	}
}

func TestBodyDecodeAllocs(t *testing.T) {
	var d BodyDecoder
	in := []byte("5;x=y\r\nhello\r\n5\r\nworld\r\n0\r\nX-T: 1\r\n\r\n")
	out := make([]byte, 0, 64)
	d.Init(chunkedReq, Config{})
	d.Decode(in, out[:0])
	allocs := testing.AllocsPerRun(100, func() {
		d.Init(chunkedReq, Config{})
		_, o, done, err := d.Decode(in, out[:0])
		if err != nil || !done || string(o) != "helloworld" || len(d.Trailers()) != 1 {
			t.Fatal("decode failed")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per decode", allocs)
	}
}
