package httpcodec

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fuzzConfigs are the limit sets the fuzzers pick from: the defaults, and
// small limits so that the limit paths are reached by small inputs.
var fuzzConfigs = []Config{
	{},
	{MaxRequestLineBytes: 40, MaxHeaderBytes: 100, MaxHeaderCount: 4, MaxBodyBytes: 64, MaxChunkLineBytes: 12},
	{MaxRequestLineBytes: 16, MaxHeaderBytes: 30, MaxHeaderCount: 1, MaxBodyBytes: 5, MaxChunkLineBytes: 5},
}

// headSummary renders everything ParseHead reports, for comparisons.
func headSummary(n int, err error, r *Request) string {
	if err != nil {
		return fmt.Sprintf("err %d", statusOf(err))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "n=%d m=%q t=%q p=%q q=%q/%v v=%d host=%q/%v cl=%d ch=%v ka=%v e100=%v up=%q/%v hl=%d\n",
		n, r.Method, r.Target, r.Path, r.RawQuery, r.RawQuery == nil, r.ProtoMinor, r.Host, r.Host == nil,
		r.ContentLength, r.Chunked, r.KeepAlive, r.Expect100, r.Upgrade, r.Upgrade == nil, r.HeadLen)
	for _, h := range r.Headers {
		fmt.Fprintf(&sb, "%q: %q\n", h.Name, h.Value)
	}
	return sb.String()
}

// splitPoints returns the places to split an input of length n at: all of
// them for short inputs, a spread for long ones.
func splitPoints(n int) []int {
	var ks []int
	if n <= 300 {
		for k := 1; k < n; k++ {
			ks = append(ks, k)
		}
		return ks
	}
	for k := 1; k < n; k += 1 + n/150 {
		ks = append(ks, k)
	}
	return append(ks, n-1)
}

func addHeadSeeds(f *testing.F) {
	for _, c := range parseErrorCases {
		f.Add([]byte(c.in), uint8(0))
	}
	for _, in := range []string{
		string(benchGET), string(benchPOST), string(benchChunked),
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"OPTIONS * HTTP/1.0\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n",
		"GET http://h:1/p?q HTTP/1.1\r\nHost: h\r\nConnection: close, upgrade\r\nUpgrade: x\r\n\r\n",
		"PUT /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 10\r\nContent-Length: 10\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: 0123456789abcdef\t0123456789abcdef\r\n\r\nGET / HTTP/1.1\r\n",
		"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n",
		"\r\n\r\r\n",
		"\r\n\n",
	} {
		for sel := range uint8(len(fuzzConfigs)) {
			f.Add([]byte(in), sel)
		}
	}
}

// FuzzParseHead checks that ParseHead never panics, never reports a head
// longer than its input, gives the same result however the input is split
// across calls, and that the head it reports does not depend on the bytes
// after it.
func FuzzParseHead(f *testing.F) {
	addHeadSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, sel uint8) {
		cfg := fuzzConfigs[int(sel)%len(fuzzConfigs)]
		var p Parser
		p.Init(cfg)
		var req Request
		n, err := p.ParseHead(data, &req)
		if err == nil && (n <= 0 || n > len(data) || n != req.HeadLen) {
			t.Fatalf("n = %d, HeadLen = %d, len = %d", n, req.HeadLen, len(data))
		}
		if err != nil && err != ErrNeedMore {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T", err)
			}
		}
		want := headSummary(n, err, &req)
		if err == nil {
			checkViews(t, data, &req, cfg)
			// The same head alone parses the same.
			var p2 Parser
			p2.Init(cfg)
			var r2 Request
			n2, err2 := p2.ParseHead(bytes.Clone(data[:n]), &r2)
			if got := headSummary(n2, err2, &r2); got != want {
				t.Fatalf("head alone:\n%s\nwhole:\n%s", got, want)
			}
		}

		// Split in two at every point; each call gets its own copy of the
		// bytes, as a growing connection buffer would.
		for _, k := range splitPoints(len(data)) {
			var ps Parser
			ps.Init(cfg)
			var rs Request
			n1, err1 := ps.ParseHead(bytes.Clone(data[:k]), &rs)
			if err1 != ErrNeedMore {
				if got := headSummary(n1, err1, &rs); got != want {
					t.Fatalf("first %d bytes alone:\n%s\nwhole:\n%s", k, got, want)
				}
				continue
			}
			n2, err2 := ps.ParseHead(bytes.Clone(data), &rs)
			if got := headSummary(n2, err2, &rs); got != want {
				t.Fatalf("split at %d:\n%s\nwhole:\n%s", k, got, want)
			}
		}

		// One byte at a time, in one growing buffer.
		if len(data) <= 400 {
			var pi Parser
			pi.Init(cfg)
			var ri Request
			var buf []byte
			for i := range data {
				buf = append(buf, data[i])
				ni, erri := pi.ParseHead(buf, &ri)
				if erri == ErrNeedMore && i < len(data)-1 {
					continue
				}
				if got := headSummary(ni, erri, &ri); got != want {
					t.Fatalf("byte by byte, stopped at %d:\n%s\nwhole:\n%s", i+1, got, want)
				}
				break
			}
		}
	})
}

// checkViews checks the invariants of a parsed request.
func checkViews(t *testing.T, data []byte, r *Request, cfg Config) {
	t.Helper()
	cfg = cfg.normalized()
	skip := 0
	for bytes.HasPrefix(data[skip:], []byte("\r\n")) {
		skip += 2
	}
	require.LessOrEqual(t, skip, 2*MaxLeadingEmptyLines, "empty lines skipped")
	data = data[skip:]
	if !bytes.HasPrefix(data, append(append(append([]byte{}, r.Method...), ' '), r.Target...)) {
		t.Fatalf("method/target %q %q not at the start", r.Method, r.Target)
	}
	if r.RawQuery != nil && !bytes.HasSuffix(r.Target, append([]byte("?"), r.RawQuery...)) {
		t.Fatalf("query %q not the end of target %q", r.RawQuery, r.Target)
	}
	if r.Target[0] == '/' {
		want := string(r.Path)
		if r.RawQuery != nil {
			want += "?" + string(r.RawQuery)
		}
		if want != string(r.Target) {
			t.Fatalf("path %q + query %q != target %q", r.Path, r.RawQuery, r.Target)
		}
	}
	if r.HeadLen-skip > cfg.MaxHeaderBytes || len(r.Headers) > cfg.MaxHeaderCount {
		t.Fatalf("limits exceeded: %d bytes, %d headers", r.HeadLen, len(r.Headers))
	}
	if r.ContentLength > cfg.MaxBodyBytes || r.Chunked && r.ContentLength != -1 {
		t.Fatalf("framing cl=%d chunked=%v", r.ContentLength, r.Chunked)
	}
	if r.ProtoMinor == 1 && r.Host == nil {
		t.Fatal("HTTP/1.1 without Host")
	}
	for _, h := range r.Headers {
		if !ValidHeaderName(h.Name) || !ValidHeaderValue(h.Value) {
			t.Fatalf("invalid header %q: %q", h.Name, h.Value)
		}
		if len(h.Value) > 0 && (trimOWS(h.Value) == nil || len(trimOWS(h.Value)) != len(h.Value)) {
			t.Fatalf("untrimmed value %q", h.Value)
		}
	}
}

func addChunkedSeeds(f *testing.F) {
	for _, c := range chunkedErrorCases {
		f.Add([]byte(c.in), uint8(0))
	}
	for _, in := range []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"3;a=b;c=\"d\\\"e\"\r\nabc\r\n0\r\nX-T: 1\r\nY:\r\n\r\nGET / HTTP/1.1\r\n",
		"0000A\r\n0123456789\r\n0\r\n\r\n",
		"1;x \t;w\r\na\r\n1; y = z\r\nb\r\n0\r\n\r\n",
		strings.Repeat("1\r\nx\r\n", 50) + "0\r\n\r\n",
	} {
		for sel := range uint8(len(fuzzConfigs)) {
			f.Add([]byte(in), sel)
		}
	}
}

// bodySummary renders what a decoder produced.
func bodySummary(consumed int, body []byte, done bool, err error, d *BodyDecoder) string {
	if err != nil {
		return fmt.Sprintf("err %d", statusOf(err))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "consumed=%d done=%v body=%q\n", consumed, done, body)
	for _, h := range d.Trailers() {
		fmt.Fprintf(&sb, "%q: %q\n", h.Name, h.Value)
	}
	return sb.String()
}

// decodeSplit decodes data given in the pieces cut at ks, feeding only the
// unconsumed bytes each time, and returns the summary.
func decodeSplit(data []byte, cfg Config, ks ...int) (string, int) {
	var d BodyDecoder
	d.Init(chunkedReq, cfg)
	var body []byte
	consumed := 0
	var done bool
	var err error
	for _, end := range append(ks, len(data)) {
		if end < consumed {
			continue
		}
		var n int
		n, body, done, err = d.Decode(bytes.Clone(data[consumed:end]), body)
		if n < 0 || n > end-consumed {
			panic(fmt.Sprintf("consumed %d of %d", n, end-consumed))
		}
		consumed += n
		if err != nil || done {
			break
		}
	}
	return bodySummary(consumed, body, done, err, &d), consumed
}

// FuzzChunked checks the chunked decoder: no panics, consumption within the
// input and never past the body, the same result however the input is
// split, and agreement with net/http's chunked reader on what it accepts.
func FuzzChunked(f *testing.F) {
	addChunkedSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, sel uint8) {
		cfg := fuzzConfigs[int(sel)%len(fuzzConfigs)]
		want, consumed := decodeSplit(data, cfg)
		for _, k := range splitPoints(len(data)) {
			if got, _ := decodeSplit(data, cfg, k); got != want {
				t.Fatalf("split at %d:\n%s\nwhole:\n%s", k, got, want)
			}
		}
		if len(data) <= 400 {
			ks := make([]int, len(data))
			for i := range ks {
				ks[i] = i + 1
			}
			if got, _ := decodeSplit(data, cfg, ks...); got != want {
				t.Fatalf("byte by byte:\n%s\nwhole:\n%s", got, want)
			}
		}
		if !strings.Contains(want, "done=true") {
			return
		}
		// The body does not depend on the bytes after it.
		if got, _ := decodeSplit(data[:consumed], cfg); got != want {
			t.Fatalf("body alone:\n%s\nwhole:\n%s", got, want)
		}
		if sel%uint8(len(fuzzConfigs)) != 0 {
			return
		}
		// net/http must accept what baton accepts, with the same body and
		// the same end.
		head := "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
		in := append([]byte(head), data...)
		rd := bytes.NewReader(in)
		br := bufio.NewReaderSize(rd, len(in)+4096)
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Fatalf("net/http rejects a body baton accepts: %v\n%s", err, want)
		}
		if used := len(in) - len(head) - rd.Len() - br.Buffered(); used != consumed {
			t.Fatalf("net/http consumed %d, baton %d", used, consumed)
		}
		if !strings.Contains(want, fmt.Sprintf("body=%q\n", body)) {
			t.Fatalf("net/http body %q, baton %s", body, want)
		}
	})
}

// FuzzDifferential runs arbitrary inputs through net/http and baton: what
// net/http rejects, baton must reject (unless a named difference), and
// what both accept must parse the same.
func FuzzDifferential(f *testing.F) {
	addHeadSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, _ uint8) {
		diffOne(t, data, false)
	})
}

// FuzzResponseHead checks that AppendResponseHead either rejects a header
// or writes one that net/http reads back as exactly that header: no
// injection.
func FuzzResponseHead(f *testing.F) {
	f.Add([]byte("X-Test"), []byte("value"), 200)
	f.Add([]byte("X"), []byte("a\r\nSet-Cookie: x=1"), 404)
	f.Add([]byte("Content-Length"), []byte("5"), 200)
	f.Add([]byte("X"), []byte("\tcaf\xc3\xa9 "), 101)
	f.Fuzz(func(t *testing.T, name, value []byte, status int) {
		h := ResponseHead{Status: status, Headers: []Header{{Name: name, Value: value}}, ContentLength: 0}
		out, err := AppendResponseHead(nil, &h)
		if err != nil {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
		if err != nil {
			t.Fatalf("net/http cannot read %q: %v", out, err)
		}
		got := resp.Header.Values(string(name))
		if len(resp.Header) != 1+boolInt(status >= 200 && status != 204) || len(got) != 1 ||
			got[0] != string(bytes.Trim(value, " \t")) || resp.StatusCode != status {
			t.Fatalf("wrote %q, net/http read %q", out, resp.Header)
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
