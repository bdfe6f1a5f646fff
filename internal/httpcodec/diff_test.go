package httpcodec

// Differential tests against net/http: on generated valid requests (and
// pipelines of them) baton must parse the same method, target, headers,
// body, trailers, framing and byte counts as http.ReadRequest; on mutated
// inputs, whatever net/http rejects baton must reject too, except for the
// deliberate differences listed in knownDifference.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stdResult is what net/http makes of one request.
type stdResult struct {
	req      *http.Request
	hosts    []string // the Host field values (ReadRequest deletes them from req.Header)
	body     []byte
	consumed int
	err      error
}

// stdlibRead reads one request with http.ReadRequest from br (reading body
// and trailers fully) and then applies the checks net/http's Server makes
// after ReadRequest (server.go, conn.readRequest and conn.serve): HTTP major
// version 1, Host present on 1.1 and valid, field names tokens and values
// free of control bytes, and Expect limited to 100-continue (417). It is
// the oracle: a server built on net/http answers with an error exactly
// when this returns one. raw holds the same bytes as br, from which the
// Host fields are read again (ReadRequest drops them from the header map
// after reading, the Server's internal reader does not).
func stdlibRead(br *bufio.Reader, raw []byte) stdResult {
	req, err := http.ReadRequest(br)
	if err != nil {
		return stdResult{err: err}
	}
	if req.ProtoMajor != 1 {
		return stdResult{err: fmt.Errorf("505")}
	}
	tp := textproto.NewReader(bufio.NewReaderSize(bytes.NewReader(raw), len(raw)+16))
	if _, err := tp.ReadLine(); err != nil {
		panic(err)
	}
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		panic(err)
	}
	hosts, haveHost := mh["Host"]
	if req.ProtoAtLeast(1, 1) && (!haveHost || len(hosts) == 0) && req.Method != "CONNECT" {
		return stdResult{err: fmt.Errorf("missing Host")}
	}
	if len(hosts) == 1 {
		for i := 0; i < len(hosts[0]); i++ {
			if !stdValidHostByte(hosts[0][i]) {
				return stdResult{err: fmt.Errorf("malformed Host")}
			}
		}
	}
	for k, vv := range req.Header {
		if !stdValidFieldName(k) {
			return stdResult{err: fmt.Errorf("invalid header name")}
		}
		for _, v := range vv {
			if !stdValidFieldValue(v) {
				return stdResult{err: fmt.Errorf("invalid header value")}
			}
		}
	}
	if e := req.Header.Get("Expect"); e != "" && !stdHasToken(e, "100-continue") {
		return stdResult{err: fmt.Errorf("417")}
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return stdResult{err: err}
	}
	return stdResult{req: req, hosts: hosts, body: body}
}

// The net/http (x/net/http/httpguts) byte rules, written out independently.
func stdValidHostByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!$%&()*+,-.:;=[]_~'", c) >= 0
}

func stdValidFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func stdValidFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func stdHasToken(v, token string) bool {
	for sp := 0; sp <= len(v)-len(token); sp++ {
		if !strings.EqualFold(v[sp:sp+len(token)], token) {
			continue
		}
		isBoundary := func(b byte) bool { return b == ' ' || b == ',' || b == '\t' }
		if (sp == 0 || isBoundary(v[sp-1])) && (sp+len(token) == len(v) || isBoundary(v[sp+len(token)])) {
			return true
		}
	}
	return false
}

// batonResult is what baton makes of one request.
type batonResult struct {
	req      Request
	body     []byte
	trailers []Header
	consumed int
	status   int  // 0 ok, else error status
	partial  bool // needs more input
}

func batonRead(in []byte) batonResult {
	var p Parser
	var r batonResult
	n, err := p.ParseHead(in, &r.req)
	if err == ErrNeedMore {
		r.partial = true
		return r
	}
	if err != nil {
		r.status = statusOf(err)
		return r
	}
	var d BodyDecoder
	d.Init(&r.req, Config{})
	m, body, done, err := d.Decode(in[n:], nil)
	if err != nil {
		r.status = statusOf(err)
		return r
	}
	if !done {
		r.partial = true
		return r
	}
	r.body = body
	r.trailers = d.Trailers()
	r.consumed = n + m
	return r
}

// compare reports how baton's result differs from net/http's for one
// request that both accepted.
func compare(b batonResult, s stdResult) error {
	sr := s.req
	if string(b.req.Method) != sr.Method {
		return fmt.Errorf("method %q vs %q", b.req.Method, sr.Method)
	}
	if string(b.req.Target) != sr.RequestURI {
		return fmt.Errorf("target %q vs %q", b.req.Target, sr.RequestURI)
	}
	if b.req.ProtoMinor != sr.ProtoMinor {
		return fmt.Errorf("minor %d vs %d", b.req.ProtoMinor, sr.ProtoMinor)
	}
	if b.req.Target[0] == '/' {
		if string(b.req.RawQuery) != sr.URL.RawQuery {
			return fmt.Errorf("query %q vs %q", b.req.RawQuery, sr.URL.RawQuery)
		}
		if p, err := url.PathUnescape(string(b.req.Path)); err != nil || p != sr.URL.Path {
			return fmt.Errorf("path %q vs %q (%v)", b.req.Path, sr.URL.Path, err)
		}
		if string(b.req.Host) != sr.Host {
			return fmt.Errorf("host %q vs %q", b.req.Host, sr.Host)
		}
	}
	if (b.req.Host == nil) != (s.hosts == nil) || b.req.Host != nil && string(b.req.Host) != s.hosts[0] {
		return fmt.Errorf("Host field %q vs %q", b.req.Host, s.hosts)
	}
	// Headers, keyed as net/http keys them. net/http removes or rewrites
	// the framing fields and adds Cache-Control for Pragma: no-cache.
	got := http.Header{}
	for _, h := range b.req.Headers {
		k := textproto.CanonicalMIMEHeaderKey(string(h.Name))
		got[k] = append(got[k], string(h.Value))
	}
	want := sr.Header.Clone()
	for _, k := range []string{"Host", "Content-Length", "Transfer-Encoding", "Trailer"} {
		delete(got, k)
		delete(want, k)
	}
	if _, ok := got["Cache-Control"]; !ok {
		delete(want, "Cache-Control")
	}
	if !headersEqual(got, want) {
		return fmt.Errorf("headers\n%q\nvs\n%q", got, want)
	}
	switch {
	case b.req.Chunked:
		if sr.ContentLength != -1 || !slices.Equal(sr.TransferEncoding, []string{"chunked"}) {
			return fmt.Errorf("chunked vs %d %q", sr.ContentLength, sr.TransferEncoding)
		}
	case b.req.ContentLength == -1:
		if sr.ContentLength != 0 {
			return fmt.Errorf("no body vs %d", sr.ContentLength)
		}
	case b.req.ContentLength != sr.ContentLength:
		return fmt.Errorf("content-length %d vs %d", b.req.ContentLength, sr.ContentLength)
	}
	if b.req.KeepAlive == sr.Close {
		return fmt.Errorf("keep-alive %v vs close %v", b.req.KeepAlive, sr.Close)
	}
	if !bytes.Equal(b.body, s.body) {
		return fmt.Errorf("body %q vs %q", b.body, s.body)
	}
	gotTr := http.Header{}
	for _, h := range b.trailers {
		k := textproto.CanonicalMIMEHeaderKey(string(h.Name))
		gotTr[k] = append(gotTr[k], string(h.Value))
	}
	wantTr := http.Header{}
	for k, v := range sr.Trailer {
		if v != nil {
			wantTr[k] = v
		}
	}
	if !headersEqual(gotTr, wantTr) {
		return fmt.Errorf("trailers %q vs %q", gotTr, wantTr)
	}
	if b.consumed != s.consumed {
		return fmt.Errorf("consumed %d vs %d", b.consumed, s.consumed)
	}
	return nil
}

func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// knownDifference names the deliberate cases where net/http rejects a
// request that baton accepts, or returns "".
func knownDifference(in []byte, b batonResult) string {
	// net/http refuses a chunked request whose Trailer header announces
	// Content-Length, Transfer-Encoding or Trailer. baton does not act on
	// the Trailer header at all: trailer fields are returned apart by
	// BodyDecoder.Trailers and never merged into the head, so announcing
	// them is harmless.
	if b.req.Chunked {
		for _, h := range b.req.Headers {
			if equalFold(h.Name, "trailer") {
				v := strings.ToLower(string(h.Value))
				if strings.Contains(v, "content-length") || strings.Contains(v, "transfer-encoding") || strings.Contains(v, "trailer") {
					return "Trailer header announcing a framing field"
				}
			}
		}
	}
	return ""
}

// diffOne runs both parsers over in (possibly several pipelined requests)
// and fails t on any disagreement that is not a named difference. It
// returns counts for reporting.
func diffOne(t testing.TB, in []byte, mustAccept bool) (accepted, stricter int) {
	rd := bytes.NewReader(in)
	br := bufio.NewReaderSize(rd, len(in)+4096)
	off := 0
	for off < len(in) {
		// baton skips up to MaxLeadingEmptyLines CRLFs before a request
		// (RFC 9112 §2.2); ReadRequest does not (net/http's Server skips
		// a few after a POST only), so the oracle is handed the request
		// after them.
		k := 0
		for k < MaxLeadingEmptyLines && bytes.HasPrefix(in[off+2*k:], []byte("\r\n")) {
			k++
		}
		_, err := br.Discard(2 * k)
		require.NoError(t, err)
		s := stdlibRead(br, in[off+2*k:])
		if s.err == nil {
			s.consumed = len(in) - rd.Len() - br.Buffered() - off
		}
		b := batonRead(in[off:])
		switch {
		case b.partial:
			// Incomplete for baton: net/http must not have accepted it.
			if s.err == nil {
				t.Fatalf("baton needs more input, net/http accepted\ninput %q", in[off:])
			}
			return
		case b.status != 0 && s.err != nil:
			return
		case b.status != 0:
			// baton is stricter; that is allowed, but not on inputs
			// generated to be valid.
			if mustAccept {
				t.Fatalf("baton rejects (%d) a valid request net/http accepts\ninput %q", b.status, in[off:])
			}
			return accepted, stricter + 1
		case s.err != nil:
			if d := knownDifference(in[off:], b); d != "" {
				return
			}
			t.Fatalf("net/http rejects (%v), baton accepts\ninput %q", s.err, in[off:])
		}
		if err := compare(b, s); err != nil {
			t.Fatalf("mismatch: %v\ninput %q", err, in[off:])
		}
		accepted++
		off += b.consumed
	}
	return
}

// gen generates valid requests.
type gen struct{ r *rand.Rand }

func (g gen) pick(s ...string) string { return s[g.r.IntN(len(s))] }

func (g gen) str(alphabet string, min, max int) string {
	n := min + g.r.IntN(max-min+1)
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.r.IntN(len(alphabet))]
	}
	return string(b)
}

const (
	alnum      = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	tokenChars = alnum + "!#$%&'*+-.^_`|~"
	pathChars  = alnum + "-._~!$&'()*+,;=:@/"
	queryChars = pathChars + "?%\"<>[]\\^`{|}#"
)

func (g gen) randCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		if g.r.IntN(2) == 0 {
			b[i] = byte(strings.ToUpper(string(c))[0])
		} else {
			b[i] = byte(strings.ToLower(string(c))[0])
		}
	}
	return string(b)
}

func (g gen) ows() string { return g.pick("", "", " ", "  ", "\t", " \t ") }

func (g gen) path() string {
	var sb strings.Builder
	for range 1 + g.r.IntN(4) {
		sb.WriteByte('/')
		sb.WriteString(g.str(pathChars, 0, 12))
		if g.r.IntN(4) == 0 {
			fmt.Fprintf(&sb, "%%%02X", g.r.IntN(256))
		}
	}
	if g.r.IntN(3) == 0 {
		sb.WriteString("?" + g.str(queryChars, 0, 30))
	}
	return sb.String()
}

func (g gen) value() string {
	const plain = alnum + " !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
	v := g.str(plain, 0, 40)
	if g.r.IntN(5) == 0 {
		v += "\t" + g.str(plain, 1, 5)
	}
	if g.r.IntN(8) == 0 {
		v += "caf\xc3\xa9\x80\xff"
	}
	return g.ows() + v + g.ows()
}

// request returns one valid request and whether it asked to close.
func (g gen) request() string {
	var sb strings.Builder
	minor := 1
	if g.r.IntN(6) == 0 {
		minor = 0
	}
	method := g.pick("GET", "GET", "GET", "POST", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "PROPFIND", "M-SEARCH", "X_Custom~1")
	target := g.path()
	host := g.pick("example.com", "a.b.c:8080", "[::1]:443", "127.0.0.1", "localhost:80", "")
	switch g.r.IntN(12) {
	case 0:
		if host != "" && host != "[::1]:443" {
			target = g.pick("http", "https", "HTTP") + "://" + host + target
		}
	case 1:
		method, target = "OPTIONS", "*"
	}
	fmt.Fprintf(&sb, "%s %s HTTP/1.%d\r\n", method, target, minor)

	var headers []string
	if minor == 1 || g.r.IntN(2) == 0 {
		headers = append(headers, g.randCase("host")+":"+g.ows()+host+g.ows())
	}
	for range g.r.IntN(10) {
		name := g.pick("Accept", "User-Agent", "Cookie", "X-Request-Id", "Content-Type", "accept-encoding",
			"Pragma", "Cache-Control", "X-Dup", "X-Dup", "Via", "Trailer", "Upgrade", "Referer")
		if g.r.IntN(4) == 0 {
			name = g.str(tokenChars, 1, 16)
		}
		if strings.EqualFold(name, "host") || strings.EqualFold(name, "content-length") ||
			strings.EqualFold(name, "transfer-encoding") || strings.EqualFold(name, "expect") ||
			strings.EqualFold(name, "connection") {
			name = "X-" + name
		}
		headers = append(headers, name+":"+g.value())
	}
	if g.r.IntN(3) == 0 {
		var toks []string
		for range 1 + g.r.IntN(3) {
			toks = append(toks, g.ows()+g.randCase(g.pick("close", "keep-alive", "upgrade", "foo", "te"))+g.ows())
		}
		headers = append(headers, g.randCase("connection")+":"+strings.Join(toks, ","))
	}
	var body string
	switch g.r.IntN(4) {
	case 1: // Content-Length
		body = g.str(alnum+"\r\n\x00\xff", 0, 100)
		cl := fmt.Sprint(len(body))
		headers = append(headers, g.randCase("content-length")+":"+g.ows()+cl+g.ows())
		if g.r.IntN(5) == 0 {
			headers = append(headers, "Content-Length: "+cl)
		}
	case 2: // chunked
		if minor == 1 {
			headers = append(headers, g.randCase("transfer-encoding")+":"+g.ows()+g.pick("chunked", "Chunked", "CHUNKED")+g.ows())
			body = g.chunked()
		}
	}
	if body != "" && minor == 1 && g.r.IntN(5) == 0 {
		headers = append(headers, "Expect: 100-continue")
	}
	g.r.Shuffle(len(headers), func(i, j int) { headers[i], headers[j] = headers[j], headers[i] })
	for _, h := range headers {
		sb.WriteString(h + "\r\n")
	}
	sb.WriteString("\r\n")
	sb.WriteString(body)
	return sb.String()
}

func (g gen) chunked() string {
	var sb strings.Builder
	for range g.r.IntN(5) {
		data := g.str(alnum+"\r\n", 1, 70)
		size := fmt.Sprintf("%x", len(data))
		if g.r.IntN(2) == 0 {
			size = strings.ToUpper(size)
		}
		if g.r.IntN(6) == 0 {
			size = "00" + size
		}
		sb.WriteString(size)
		if g.r.IntN(4) == 0 {
			sb.WriteString(g.pick(";a", ";a=b", `;q="x y"`, ";a=1;b", ";name=val;n2=\"v\\\"2\""))
		}
		sb.WriteString("\r\n" + data + "\r\n")
	}
	sb.WriteString("0\r\n")
	for range g.r.IntN(3) {
		sb.WriteString(g.pick("X-Checksum", "Server-Timing", "x-t") + ":" + g.value() + "\r\n")
	}
	sb.WriteString("\r\n")
	return sb.String()
}

func diffCount(t *testing.T) int {
	if testing.Short() {
		return 500
	}
	return 5000
}

func TestDifferentialValid(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(1, 2))}
	total := 0
	for range diffCount(t) {
		var in string
		for range 1 + g.r.IntN(3) {
			if g.r.IntN(4) == 0 {
				in += strings.Repeat("\r\n", 1+g.r.IntN(MaxLeadingEmptyLines))
			}
			in += g.request()
		}
		n, _ := diffOne(t, []byte(in), true)
		total += n
	}
	t.Logf("%d requests agreed", total)
}

// mutate applies a few random edits that tend to hit parser edge cases.
func (g gen) mutate(s string) string {
	b := []byte(s)
	for range 1 + g.r.IntN(3) {
		if len(b) == 0 {
			break
		}
		i := g.r.IntN(len(b))
		ins := g.pick("\r", "\n", "\r\n", " ", "\t", ":", "\x00", "\x7f", "\x80", "0", "a", ",", ";", "\"",
			"chunked", "Content-Length: 1\r\n", "Transfer-Encoding: gzip\r\n", "Host: x\r\n", "Expect: x\r\n",
			"\r\n ", "%", "%zz", "?", "#", "[", "@", "HTTP/1.1", "ff", "\r\n\r\n", "Trailer: content-length\r\n")
		switch g.r.IntN(3) {
		case 0: // insert
			b = slices.Insert(b, i, []byte(ins)...)
		case 1: // delete a few bytes
			j := min(len(b), i+1+g.r.IntN(3))
			b = slices.Delete(b, i, j)
		case 2: // replace one byte
			b[i] = ins[0]
		}
	}
	return string(b)
}

func TestDifferentialMutated(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(3, 4))}
	acc, strict := 0, 0
	for range 4 * diffCount(t) {
		in := g.mutate(g.request())
		a, s := diffOne(t, []byte(in), false)
		acc += a
		strict += s
	}
	t.Logf("%d mutated requests accepted by both; %d accepted only by net/http", acc, strict)
}

// TestDifferentialStricter lists inputs that net/http accepts and baton
// rejects on purpose, so that the differences are documented and stay put.
func TestDifferentialStricter(t *testing.T) {
	tests := []struct{ why, in string }{
		{"bare LF line endings", "GET / HTTP/1.1\nHost: a\n\n"},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n"},
		{"CL and TE together (net/http drops CL)", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"TE on HTTP/1.0 (net/http ignores it)", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"HTTP/1.2 (net/http serves it as 1.x)", "GET / HTTP/1.2\r\nHost: a\r\n\r\n"},
		{"asterisk-form with GET", "GET * HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"CONNECT with a path", "CONNECT /rpc HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"CONNECT without Host", "CONNECT a:443 HTTP/1.1\r\n\r\n"},
		{"non-ASCII byte in target", "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"userinfo in absolute-form", "GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n"},
		{"IPv6 zone in absolute-form", "GET http://[fe80::1%25en0]/ HTTP/1.1\r\nHost: h\r\n\r\n"},
		{"whitespace after chunk size", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1 \r\na\r\n0\r\n\r\n"},
		{"malformed chunk extension", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;=\r\na\r\n0\r\n\r\n"},
		{"Expect with an extra member", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, foo\r\nContent-Length: 0\r\n\r\n"},
	}
	for _, tt := range tests {
		in := []byte(tt.in)
		s := stdlibRead(bufio.NewReaderSize(bytes.NewReader(in), len(in)+4096), in)
		b := batonRead(in)
		assert.NoError(t, s.err, "%s: net/http now rejects it; move it out of this list", tt.why)
		assert.NotZero(t, b.status, "%s: baton accepts it", tt.why)
	}
}

// TestDifferentialKnown checks the named difference in the other direction.
func TestDifferentialKnown(t *testing.T) {
	in := []byte("POST / HTTP/1.1\r\nHost: a\r\nTrailer: Content-Length\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	s := stdlibRead(bufio.NewReaderSize(bytes.NewReader(in), len(in)+4096), in)
	b := batonRead(in)
	if s.err == nil || b.status != 0 || knownDifference(in, b) == "" {
		t.Fatalf("net/http %v, baton %d", s.err, b.status)
	}
}

// readStdlibResponse parses a response written by this package with
// net/http.
func readStdlibResponse(t *testing.T, out []byte) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}
