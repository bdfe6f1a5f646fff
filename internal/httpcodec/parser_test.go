package httpcodec

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// parseAll parses in as one buffer and returns the request, the head length
// and the status: 0 for success, -1 for ErrNeedMore, else the error status.
func parseAll(cfg Config, in string) (*Request, int, int) {
	p := NewParser(cfg)
	req := new(Request)
	n, err := p.ParseHead([]byte(in), req)
	return req, n, statusOf(err)
}

func statusOf(err error) int {
	var e *Error
	switch {
	case err == nil:
		return 0
	case err == ErrNeedMore:
		return -1
	case errors.As(err, &e):
		return e.Status
	}
	panic(fmt.Sprintf("unexpected error type %T: %v", err, err))
}

// parseSplit feeds in in two pieces (split at k), resuming the same parser,
// and returns what parseAll returns.
func parseSplit(cfg Config, in string, k int) (*Request, int, int) {
	p := NewParser(cfg)
	req := new(Request)
	// Each call gets a fresh copy so that views into a moved buffer are
	// caught.
	first := []byte(in[:k])
	n, err := p.ParseHead(first, req)
	if err != ErrNeedMore {
		return req, n, statusOf(err)
	}
	full := []byte(in)
	n, err = p.ParseHead(full, req)
	return req, n, statusOf(err)
}

type reqWant struct {
	method, target, path, query string
	noQuery                     bool // RawQuery must be nil
	minor                       int
	headers                     []string // "Name: Value"
	host                        string
	cl                          int64
	chunked, keepAlive          bool
	expect100                   bool
	upgrade                     string
}

func checkReq(t *testing.T, req *Request, n int, in string, w reqWant) {
	t.Helper()
	if n != strings.Index(in, "\r\n\r\n")+4 || n != req.HeadLen {
		t.Errorf("n = %d, HeadLen = %d, want %d", n, req.HeadLen, strings.Index(in, "\r\n\r\n")+4)
	}
	eq := func(what string, got []byte, want string) {
		t.Helper()
		if string(got) != want {
			t.Errorf("%s = %q, want %q", what, got, want)
		}
	}
	eq("Method", req.Method, w.method)
	eq("Target", req.Target, w.target)
	eq("Path", req.Path, w.path)
	eq("RawQuery", req.RawQuery, w.query)
	if w.noQuery && req.RawQuery != nil {
		t.Errorf("RawQuery = %q, want nil", req.RawQuery)
	}
	if !w.noQuery && req.RawQuery == nil {
		t.Errorf("RawQuery = nil, want %q", w.query)
	}
	eq("Host", req.Host, w.host)
	eq("Upgrade", req.Upgrade, w.upgrade)
	if req.ProtoMinor != w.minor || req.ContentLength != w.cl || req.Chunked != w.chunked ||
		req.KeepAlive != w.keepAlive || req.Expect100 != w.expect100 {
		t.Errorf("minor/cl/chunked/keepalive/expect100 = %d/%d/%v/%v/%v, want %d/%d/%v/%v/%v",
			req.ProtoMinor, req.ContentLength, req.Chunked, req.KeepAlive, req.Expect100,
			w.minor, w.cl, w.chunked, w.keepAlive, w.expect100)
	}
	if w.headers != nil {
		var got []string
		for _, h := range req.Headers {
			got = append(got, string(h.Name)+": "+string(h.Value))
		}
		if strings.Join(got, "\n") != strings.Join(w.headers, "\n") {
			t.Errorf("headers = %q, want %q", got, w.headers)
		}
	}
}

func TestParseHeadValid(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want reqWant
	}{
		{"simple GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true,
				headers: []string{"Host: a"}}},
		{"query", "GET /p/q?x=1&y=%41 HTTP/1.1\r\nHost: a\r\n\r\n",
			reqWant{method: "GET", target: "/p/q?x=1&y=%41", path: "/p/q", query: "x=1&y=%41", minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"empty query", "GET /p? HTTP/1.1\r\nHost: a\r\n\r\n",
			reqWant{method: "GET", target: "/p?", path: "/p", query: "", minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"second ? stays in query", "GET /p?a?b HTTP/1.1\r\nHost: a\r\n\r\n",
			reqWant{method: "GET", target: "/p?a?b", path: "/p", query: "a?b", minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"percent in query unchecked", "GET /p?q=100% HTTP/1.1\r\nHost: a\r\n\r\n",
			reqWant{method: "GET", target: "/p?q=100%", path: "/p", query: "q=100%", minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"raw punctuation in target", "GET /a|b{c}\"d\\e^f`g HTTP/1.1\r\nHost: a\r\n\r\n",
			reqWant{method: "GET", target: "/a|b{c}\"d\\e^f`g", path: "/a|b{c}\"d\\e^f`g", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"custom method token", "M-SEARCH! /x HTTP/1.1\r\nHost: a\r\n\r\n",
			reqWant{method: "M-SEARCH!", target: "/x", path: "/x", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"absolute-form", "GET http://example.com:8080/a/b?c HTTP/1.1\r\nHost: example.com:8080\r\n\r\n",
			reqWant{method: "GET", target: "http://example.com:8080/a/b?c", path: "/a/b", query: "c", minor: 1, host: "example.com:8080", cl: -1, keepAlive: true}},
		{"absolute-form no path", "GET https://example.com HTTP/1.1\r\nHost: x\r\n\r\n",
			reqWant{method: "GET", target: "https://example.com", path: "", noQuery: true, minor: 1, host: "x", cl: -1, keepAlive: true}},
		{"absolute-form query no path", "GET http://h?q HTTP/1.1\r\nHost: h\r\n\r\n",
			reqWant{method: "GET", target: "http://h?q", path: "", query: "q", minor: 1, host: "h", cl: -1, keepAlive: true}},
		{"absolute-form IPv6", "GET http://[::1]:80/ HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
			reqWant{method: "GET", target: "http://[::1]:80/", path: "/", noQuery: true, minor: 1, host: "[::1]:80", cl: -1, keepAlive: true}},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
			reqWant{method: "OPTIONS", target: "*", path: "*", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"CONNECT authority", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
			reqWant{method: "CONNECT", target: "example.com:443", path: "", noQuery: true, minor: 1, host: "example.com:443", cl: -1, keepAlive: true}},
		{"HTTP/1.0 no host", "GET / HTTP/1.0\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 0, cl: -1, keepAlive: false, headers: []string{}}},
		{"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 0, cl: -1, keepAlive: true}},
		{"HTTP/1.0 keep-alive and close", "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 0, cl: -1, keepAlive: false}},
		{"HTTP/1.1 close", "GET / HTTP/1.1\r\nHost: a\r\nConnection: foo , CLOSE\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: false}},
		{"close in second Connection field", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: false}},
		{"close as substring is not a token", "GET / HTTP/1.1\r\nHost: a\r\nConnection: closed, xclose\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"headers kept in order, repeated kept, OWS trimmed", "GET / HTTP/1.1\r\nHost: a\r\nX-A:1\r\nx-a: \t 2 \t\r\nX-Empty:\r\nX-Sp:   \r\nX-In: a  b\tc\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true,
				headers: []string{"Host: a", "X-A: 1", "x-a: 2", "X-Empty: ", "X-Sp: ", "X-In: a  b\tc"}}},
		{"obs-text in value", "GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\xff\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true,
				headers: []string{"Host: a", "X: caf\xc3\xa9\xff"}}},
		{"content-length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n",
			reqWant{method: "POST", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: 10, keepAlive: true}},
		{"content-length leading zeros", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n",
			reqWant{method: "POST", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: 7, keepAlive: true}},
		{"content-length repeated equal", "POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 5\r\nContent-Length:  5 \r\n\r\n",
			reqWant{method: "POST", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: 5, keepAlive: true}},
		{"content-length zero", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
			reqWant{method: "POST", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: 0, keepAlive: true}},
		{"chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n",
			reqWant{method: "POST", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: -1, chunked: true, keepAlive: true}},
		{"expect 100-continue", "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n",
			reqWant{method: "PUT", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: 3, keepAlive: true, expect100: true}},
		{"expect 100-continue chunked", "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
			reqWant{method: "PUT", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: -1, chunked: true, keepAlive: true, expect100: true}},
		{"expect 100-continue without body", "GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"expect 100-continue ignored on 1.0", "PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
			reqWant{method: "PUT", target: "/", path: "/", noQuery: true, minor: 0, cl: 3}},
		{"empty expect ignored", "GET / HTTP/1.1\r\nHost: a\r\nExpect:\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"upgrade surfaced", "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n",
			reqWant{method: "GET", target: "/ws", path: "/ws", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true, upgrade: "websocket"}},
		{"upgrade without connection token", "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n",
			reqWant{method: "GET", target: "/ws", path: "/ws", noQuery: true, minor: 1, host: "a", cl: -1, keepAlive: true}},
		{"empty host allowed", "GET / HTTP/1.1\r\nHost:\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 1, host: "", cl: -1, keepAlive: true}},
		{"IPv6 host", "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]:8080\r\n\r\n",
			reqWant{method: "GET", target: "/", path: "/", noQuery: true, minor: 1, host: "[fe80::1%25eth0]:8080", cl: -1, keepAlive: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, n, st := parseAll(Config{}, tt.in)
			if st != 0 {
				t.Fatalf("status %d, want success", st)
			}
			checkReq(t, req, n, tt.in, tt.want)
			for k := 1; k < len(tt.in); k++ {
				req, n, st := parseSplit(Config{}, tt.in, k)
				if st != 0 {
					t.Fatalf("split at %d: status %d", k, st)
				}
				checkReq(t, req, n, tt.in, tt.want)
			}
		})
	}
}

// errCase is an input and the status it must get.
type errCase struct {
	name   string
	in     string
	status int
}

var parseErrorCases = []errCase{
	// Request line.
	{"nine empty lines first", strings.Repeat("\r\n", 9) + "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"bare LF empty line first", "\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"CRLF then bare LF first", "\r\n\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"bare CR empty line first", "\r\n\rGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"space line first", " \r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"leading space", " GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"TLS handshake", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400},
	{"no target", "GET\r\nHost: a\r\n\r\n", 400},
	{"no version", "GET /\r\nHost: a\r\n\r\n", 400},
	{"bad method char", "GE(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"method then tab", "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"double space", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"space in target", "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"trailing space", "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400},
	{"control in target", "GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"DEL in target", "GET /a\x7f HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"non-ASCII in target", "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"bad percent in path", "GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"truncated percent in path", "GET /a%4 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"truncated percent before query", "GET /a%4?x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"relative target", "GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"asterisk with GET", "GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"asterisk prefix", "OPTIONS *x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"CONNECT origin-form", "CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"CONNECT without port", "CONNECT example.com HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"authority-form with GET", "GET example.com:80 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"absolute without //", "GET http:/x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"absolute empty host", "GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"absolute userinfo", "GET http://u:p@h/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"absolute bad port", "GET http://h:8x/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"absolute bad IPv6", "GET http://[1:2]/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"absolute IPv4 in brackets", "GET http://[1.2.3.4]/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"absolute empty brackets", "GET http://[]/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"absolute bad scheme", "GET 1http://h/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"absolute bad percent", "GET http://h/%g0 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
	{"lowercase version", "GET / http/1.1\r\nHost: a\r\n\r\n", 400},
	{"version garbage", "GET / HTTP/1.x\r\nHost: a\r\n\r\n", 400},
	{"version two digits", "GET / HTTP/1.10\r\nHost: a\r\n\r\n", 400},
	{"version short", "GET / HTTP/1\r\nHost: a\r\n\r\n", 400},
	{"HTTP/0.9 style", "GET /\r\n\r\n", 400},
	{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
	{"HTTP/1.2", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505},
	{"HTTP/0.9", "GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505},
	{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505},
	{"bare LF request line", "GET / HTTP/1.1\nHost: a\r\n\r\n", 400},
	{"CR in request line", "GET /\r HTTP/1.1\r\nHost: a\r\n\r\n", 400},

	// Field lines.
	{"bare LF field", "GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", 400},
	{"bare LF end", "GET / HTTP/1.1\r\nHost: a\r\n\n", 400},
	{"bare CR end", "GET / HTTP/1.1\r\nHost: a\r\n\rX", 400},
	{"bare CR in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400},
	{"CR CR LF", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\r\n\r\n", 400},
	{"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
	{"tab before colon", "GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", 400},
	{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nXYZ\r\n\r\n", 400},
	{"empty name", "GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n", 400},
	{"bad name char", "GET / HTTP/1.1\r\nHost: a\r\nX(Y): v\r\n\r\n", 400},
	{"non-ASCII name", "GET / HTTP/1.1\r\nHost: a\r\nX\xc3\xa9: v\r\n\r\n", 400},
	{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", 400},
	{"obs-fold tab", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n\tb\r\n\r\n", 400},
	{"first field starts with space", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400},
	{"NUL in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", 400},
	{"control in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x1bb\r\n\r\n", 400},
	{"DEL in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n", 400},
	{"LF in value after SWAR block", "GET / HTTP/1.1\r\nHost: a\r\nX: 0123456789abcdef\nb\r\n\r\n", 400},

	// Host.
	{"missing Host 1.1", "GET / HTTP/1.1\r\nX: y\r\n\r\n", 400},
	{"missing Host absolute-form", "GET http://h/ HTTP/1.1\r\n\r\n", 400},
	{"repeated Host", "GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", 400},
	{"repeated Host 1.0", "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400},
	{"bad Host char", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400},
	{"Host with space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},

	// Content-Length.
	{"CL empty", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", 400},
	{"CL sign", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400},
	{"CL negative", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
	{"CL hex", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n", 400},
	{"CL inner space", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 0\r\n\r\n", 400},
	{"CL list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400},
	{"CL overflow", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
	{"CL differ", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400},
	{"CL differ in form", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 05\r\n\r\n", 400},
	{"CL too large", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 8388609\r\n\r\n", 413},
	{"CL max int64", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775807\r\n\r\n", 413},

	// Transfer-Encoding.
	{"CL and TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
	{"TE and CL", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400},
	{"TE on 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
	{"TE chunked twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400},
	{"TE chunked twice in two fields", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
	{"TE chunked not last", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400},
	{"TE chunked not last two fields", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", 400},
	{"TE empty", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n", 400},
	{"TE empty element", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , chunked\r\n\r\n", 400},
	{"TE trailing comma", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked,\r\n\r\n", 400},
	{"TE only commas", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , ,\r\n\r\n", 400},
	{"TE junk", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked x\r\n\r\n", 400},
	{"TE non-token", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\n\r\n", 400},
	{"TE gzip", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
	{"TE gzip chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
	{"TE identity", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 501},
	{"TE chunked with params", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", 501},
	{"TE chunk (typo)", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunk\r\n\r\n", 501},

	// Expect.
	{"Expect other", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", 417},
	{"Expect only comma", "POST / HTTP/1.1\r\nHost: a\r\nExpect: ,\r\n\r\n", 417},
	{"Expect continue and other", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, x\r\n\r\n", 417},
}

func TestParseHeadErrors(t *testing.T) {
	for _, tt := range parseErrorCases {
		t.Run(tt.name, func(t *testing.T) {
			_, _, st := parseAll(Config{}, tt.in)
			if st != tt.status {
				t.Fatalf("status %d, want %d", st, tt.status)
			}
			for k := 1; k < len(tt.in); k++ {
				if _, _, st := parseSplit(Config{}, tt.in, k); st != tt.status {
					t.Fatalf("split at %d: status %d, want %d", k, st, tt.status)
				}
			}
		})
	}
}

func TestParseHeadErrorMessages(t *testing.T) {
	_, err := new(Parser).ParseHead([]byte("GET / HTTP/2.0\r\n\r\n"), new(Request))
	var e *Error
	if !errors.As(err, &e) || e.Status != 505 {
		t.Fatalf("err = %v", err)
	}
	if got := err.Error(); got != "httpcodec: 505 HTTP version not supported" {
		t.Errorf("Error() = %q", got)
	}
	if !strings.HasPrefix(ErrNeedMore.Error(), "httpcodec: ") ||
		!strings.HasPrefix(ErrInvalidHeader.Error(), "httpcodec: ") ||
		!strings.HasPrefix(ErrInvalidStatus.Error(), "httpcodec: ") {
		t.Error("sentinel errors must start with httpcodec: ")
	}
}

func TestLimits(t *testing.T) {
	small := Config{MaxRequestLineBytes: 32, MaxHeaderBytes: 128, MaxHeaderCount: 3, MaxBodyBytes: 100}
	tests := []struct {
		name   string
		cfg    Config
		in     string
		status int
	}{
		// The request line is 32 bytes with its CRLF: allowed.
		{"request line at limit", small, "GET /" + strings.Repeat("a", 16) + " HTTP/1.1\r\nHost: a\r\n\r\n", 0},
		{"request line over limit", small, "GET /" + strings.Repeat("a", 17) + " HTTP/1.1\r\nHost: a\r\n\r\n", 414},
		{"request line over limit, incomplete", small, "GET /" + strings.Repeat("a", 40), 414},
		{"request line incomplete, at limit", small, "GET /" + strings.Repeat("a", 26), -1},
		{"request line over limit, bad content", small, "GET /" + strings.Repeat("\x01", 40) + " HTTP/1.1\r\n\r\n", 414},
		{"head at limit", small, "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("v", 128-32) + "\r\n\r\n", 0},
		{"head over limit", small, "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("v", 128-31) + "\r\n\r\n", 431},
		{"head over limit, incomplete", small, "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("v", 200), 431},
		{"head over limit in name, incomplete", small, "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X", 200), 431},
		{"head over limit, many lines", small, "GET / HTTP/1.0\r\n" + strings.Repeat("X: 0123456789\r\n", 3) + strings.Repeat("Y", 100), 431},
		{"bad byte before limit wins", small, "GET / HTTP/1.1\r\nHost: a\r\nX: \x01" + strings.Repeat("v", 200), 400},
		{"bad byte after limit ignored", small, "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("v", 200) + "\x01\r\n\r\n", 431},
		{"header count at limit", small, "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n", 0},
		{"header count over limit", small, "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", 431},
		{"header count over limit, incomplete", small, "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC", 431},
		{"body at limit", small, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n", 0},
		{"body over limit", small, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n", 413},
		{"request line limit capped at head limit", Config{MaxRequestLineBytes: 1000, MaxHeaderBytes: 40},
			"GET /" + strings.Repeat("a", 50) + " HTTP/1.1\r\n", 414},
		{"default request line limit", Config{}, "GET /" + strings.Repeat("a", 8192) + " HTTP/1.1\r\n", 414},
		{"default head limit", Config{}, "GET / HTTP/1.1\r\nHost: a\r\nCookie: " + strings.Repeat("c", 65536) + "\r\n\r\n", 431},
		{"default header count", Config{}, "GET / HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 101) + "\r\n", 431},
		{"default body limit", Config{}, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 8388609\r\n\r\n", 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, st := parseAll(tt.cfg, tt.in); st != tt.status {
				t.Fatalf("status %d, want %d", st, tt.status)
			}
			step := 1
			if len(tt.in) > 1000 {
				step = 97
			}
			for k := 1; k < len(tt.in); k += step {
				if _, _, st := parseSplit(tt.cfg, tt.in, k); st != tt.status && st != -1 {
					t.Fatalf("split at %d: status %d, want %d", k, st, tt.status)
				}
			}
		})
	}
}

// TestLimitsEarly checks that limits fire before the head is complete: a
// client streaming an endless head is stopped once it passes the limit.
func TestLimitsEarly(t *testing.T) {
	cfg := Config{MaxHeaderBytes: 1024}
	p := NewParser(cfg)
	var req Request
	buf := []byte("GET / HTTP/1.1\r\nHost: a\r\n")
	for i := 0; ; i++ {
		buf = append(buf, "X-Pad: 0123456789\r\n"...)
		_, err := p.ParseHead(buf, &req)
		if err == ErrNeedMore {
			if len(buf) > 1024+20 {
				t.Fatalf("still ErrNeedMore at %d bytes", len(buf))
			}
			continue
		}
		if statusOf(err) != 431 {
			t.Fatalf("got %v, want 431", err)
		}
		if len(buf) <= 1024 {
			t.Fatalf("431 at %d bytes, before the limit", len(buf))
		}
		return
	}
}

func TestIncrementalNoRescan(t *testing.T) {
	// A large head arriving in small reads: each call must start where the
	// previous one stopped.
	var sb strings.Builder
	sb.WriteString("GET /big HTTP/1.1\r\nHost: example.com\r\n")
	for i := range 60 {
		fmt.Fprintf(&sb, "X-Field-%d: %s\r\n", i, strings.Repeat("v", 500))
	}
	sb.WriteString("\r\n")
	in := []byte(sb.String())
	var p Parser
	var req Request
	prevScan := 0
	for k := 7; ; k += 7 {
		k = min(k, len(in))
		// Copy into a fresh buffer each time, as a growing connection
		// buffer would.
		buf := append([]byte(nil), in[:k]...)
		n, err := p.ParseHead(buf, &req)
		if err == nil {
			if n != len(in) || len(req.Headers) != 61 || string(req.Host) != "example.com" {
				t.Fatalf("n=%d headers=%d host=%q", n, len(req.Headers), req.Host)
			}
			for i, h := range req.Headers[1:] {
				if string(h.Name) != fmt.Sprintf("X-Field-%d", i) || len(h.Value) != 500 {
					t.Fatalf("header %d = %q", i, h.Name)
				}
				// The views must point into the last buffer.
				if &h.Value[0] != &buf[bytes.Index(buf, h.Name)+len(h.Name)+2] {
					t.Fatalf("header %d does not point into the current buffer", i)
				}
			}
			return
		}
		if err != ErrNeedMore {
			t.Fatal(err)
		}
		// White box: the parser has examined all but possibly a final CR.
		if p.scan < k-1 || p.scan < prevScan {
			t.Fatalf("after %d bytes scan=%d (prev %d)", k, p.scan, prevScan)
		}
		prevScan = p.scan
	}
}

func TestPipelining(t *testing.T) {
	reqs := []string{
		"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
		"POST /3 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n",
		"GET /4 HTTP/1.0\r\n\r\n",
		"DELETE /5 HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	}
	bodies := []string{"", "hello", "abc", "", ""}
	all := []byte(strings.Join(reqs, ""))
	var p Parser
	var req Request
	var d BodyDecoder
	off := 0
	for i := range reqs {
		n, err := p.ParseHead(all[off:], &req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if want := fmt.Sprintf("/%d", i+1); string(req.Target) != want {
			t.Fatalf("request %d: target %q", i, req.Target)
		}
		off += n
		d.Init(&req, Config{})
		m, body, done, err := d.Decode(all[off:], nil)
		if err != nil || !done {
			t.Fatalf("request %d body: %v %v", i, done, err)
		}
		if string(body) != bodies[i] {
			t.Fatalf("request %d body %q", i, body)
		}
		off += m
		if off != len(strings.Join(reqs[:i+1], "")) {
			t.Fatalf("request %d ends at %d, want %d", i, off, len(strings.Join(reqs[:i+1], "")))
		}
	}
	if off != len(all) {
		t.Fatalf("consumed %d of %d", off, len(all))
	}
}

func TestParseHeadReuseRequest(t *testing.T) {
	var p Parser
	var req Request
	in1 := []byte("GET /a HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: upgrade\r\nContent-Length: 3\r\n\r\n")
	in2 := []byte("GET /b?x HTTP/1.0\r\n\r\n")
	if _, err := p.ParseHead(in1, &req); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ParseHead(in2, &req); err != nil {
		t.Fatal(err)
	}
	if len(req.Headers) != 0 || req.Host != nil || req.Upgrade != nil || req.ContentLength != -1 ||
		string(req.Path) != "/b" || string(req.RawQuery) != "x" || req.KeepAlive {
		t.Fatalf("stale fields: %+v", req)
	}
}

func TestParseHeadResumeWithOtherRequest(t *testing.T) {
	in := []byte("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\nY: 2\r\n\r\n")
	var p Parser
	var r1, r2 Request
	if _, err := p.ParseHead(in[:30], &r1); err != ErrNeedMore {
		t.Fatal(err)
	}
	if _, err := p.ParseHead(in, &r2); err != nil {
		t.Fatal(err)
	}
	if len(r2.Headers) != 3 || string(r2.Headers[1].Value) != "1" {
		t.Fatalf("headers %q", r2.Headers)
	}
}

func TestParseHeadContractViolation(t *testing.T) {
	// A shorter buffer on resume must not panic.
	var p Parser
	var req Request
	in := []byte("GET / HTTP/1.1\r\nHost: a\r\nX: 1")
	if _, err := p.ParseHead(in, &req); err != ErrNeedMore {
		t.Fatal(err)
	}
	if _, err := p.ParseHead(in[:5], &req); err != ErrNeedMore {
		t.Fatal(err)
	}
	if n, err := p.ParseHead([]byte("GET / HTTP/1.0\r\n\r\n"), &req); err != nil || n != 18 {
		t.Fatal(n, err)
	}
	if _, err := p.ParseHead(nil, &req); err != ErrNeedMore {
		t.Fatal(err)
	}
}

func TestParseHeadAllocs(t *testing.T) {
	var p Parser
	var req Request
	if _, err := p.ParseHead(benchGET, &req); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := p.ParseHead(benchGET, &req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per parse", allocs)
	}
}

func TestGet(t *testing.T) {
	req, _, st := parseAll(Config{}, "GET / HTTP/1.1\r\nHost: a\r\nX-Multi: 1\r\nx-multi: 2\r\nContent-Type: text/plain\r\n\r\n")
	if st != 0 {
		t.Fatal(st)
	}
	for _, tt := range []struct {
		name, want string
		ok         bool
	}{
		{"x-multi", "1", true}, {"X-MULTI", "1", true}, {"content-type", "text/plain", true},
		{"Host", "a", true}, {"missing", "", false}, {"X-Mult", "", false},
	} {
		v, ok := req.Get(tt.name)
		if string(v) != tt.want || ok != tt.ok {
			t.Errorf("Get(%q) = %q, %v", tt.name, v, ok)
		}
	}
}

func TestRequestReset(t *testing.T) {
	req, _, _ := parseAll(Config{}, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n")
	c := cap(req.Headers)
	req.Reset()
	if req.Method != nil || len(req.Headers) != 0 || cap(req.Headers) != c || req.ContentLength != -1 || req.HeadLen != 0 {
		t.Fatalf("after Reset: %+v", req)
	}
}

func TestCopyTo(t *testing.T) {
	in := []byte("GET http://h/p?q=1 HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nX: y\r\n\r\n")
	var p Parser
	var req Request
	if _, err := p.ParseHead(in, &req); err != nil {
		t.Fatal(err)
	}
	var dst Request
	arena := make([]byte, 0, 256)
	dst.Headers = make([]Header, 0, 8)
	allocs := testing.AllocsPerRun(10, func() {
		arena = req.CopyTo(&dst, arena[:0])
	})
	if allocs != 0 {
		t.Errorf("CopyTo: %v allocs with capacity", allocs)
	}
	// Clobber the input: dst must not change.
	for i := range in {
		in[i] = '#'
	}
	if string(dst.Method) != "GET" || string(dst.Target) != "http://h/p?q=1" || string(dst.Path) != "/p" ||
		string(dst.RawQuery) != "q=1" || string(dst.Host) != "h" || string(dst.Upgrade) != "websocket" ||
		len(dst.Headers) != 4 || string(dst.Headers[3].Name) != "X" || string(dst.Headers[3].Value) != "y" ||
		dst.HeadLen != req.HeadLen || !dst.KeepAlive {
		t.Fatalf("copy: %+v", dst)
	}
	// Appending to a copied view must not overwrite its neighbour.
	_ = append(dst.Method, "XXXX"...)
	if string(dst.Target) != "http://h/p?q=1" {
		t.Fatal("views are not capacity-limited")
	}
	// Nil views stay nil; a too-small arena grows.
	req2, _, _ := parseAll(Config{}, "GET / HTTP/1.0\r\n\r\n")
	var dst2 Request
	arena2 := req2.CopyTo(&dst2, nil)
	if dst2.RawQuery != nil || dst2.Host != nil || dst2.Upgrade != nil || string(dst2.Path) != "/" || len(arena2) != 5 {
		t.Fatalf("copy2: %+v arena %q", dst2, arena2)
	}
	// Copying onto itself works.
	req3, _, _ := parseAll(Config{}, "GET /x HTTP/1.1\r\nHost: z\r\n\r\n")
	req3.CopyTo(req3, nil)
	if string(req3.Path) != "/x" || string(req3.Headers[0].Value) != "z" {
		t.Fatalf("self copy: %+v", req3)
	}
}
