package httpcodec

import (
	"net/http"
	"testing"
	"time"
)

func hdr(name, value string) Header { return Header{Name: []byte(name), Value: []byte(value)} }

func TestAppendResponseHead(t *testing.T) {
	date := []byte("Tue, 11 Jun 2024 09:30:00 GMT")
	tests := []struct {
		name string
		h    ResponseHead
		want string
	}{
		{"200 with length", ResponseHead{Status: 200, ContentLength: 5, Headers: []Header{hdr("Content-Type", "text/plain")}},
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n"},
		{"date and close", ResponseHead{Status: 404, ContentLength: 0, Close: true, Date: date},
			"HTTP/1.1 404 Not Found\r\nDate: Tue, 11 Jun 2024 09:30:00 GMT\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"},
		{"chunked", ResponseHead{Status: 200, Chunked: true, ContentLength: 99},
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"keep-alive for 1.0", ResponseHead{Status: 200, ContentLength: 2, KeepAlive10: true},
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n"},
		{"close wins", ResponseHead{Status: 200, ContentLength: 2, KeepAlive10: true, Close: true},
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"},
		{"no length", ResponseHead{Status: 304, ContentLength: -1},
			"HTTP/1.1 304 Not Modified\r\n\r\n"},
		{"304 keeps length", ResponseHead{Status: 304, ContentLength: 10},
			"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"},
		{"204 drops framing", ResponseHead{Status: 204, ContentLength: 0, Chunked: true},
			"HTTP/1.1 204 No Content\r\n\r\n"},
		{"101 drops framing", ResponseHead{Status: 101, ContentLength: 0, Headers: []Header{hdr("Upgrade", "websocket"), hdr("Connection", "Upgrade")}},
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"},
		{"unknown status", ResponseHead{Status: 599, ContentLength: 0},
			"HTTP/1.1 599 \r\nContent-Length: 0\r\n\r\n"},
		{"rfc 9110 names", ResponseHead{Status: 413, ContentLength: -1},
			"HTTP/1.1 413 Content Too Large\r\n\r\n"},
		{"repeated and odd values", ResponseHead{Status: 200, ContentLength: 0, Headers: []Header{hdr("Set-Cookie", "a=1"), hdr("Set-Cookie", "b=2"), hdr("X", ""), hdr("X-Tab", "a\tb"), hdr("X-Obs", "caf\xc3\xa9")}},
			"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nX: \r\nX-Tab: a\tb\r\nX-Obs: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := AppendResponseHead([]byte("prefix"), &tt.h)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != "prefix"+tt.want {
				t.Fatalf("got  %q\nwant %q", out, "prefix"+tt.want)
			}
		})
	}
}

func TestAppendResponseHeadRejects(t *testing.T) {
	tests := []struct {
		name string
		h    ResponseHead
		err  error
	}{
		{"CRLF in value", ResponseHead{Status: 200, Headers: []Header{hdr("X", "a\r\nSet-Cookie: evil=1")}}, ErrInvalidHeader},
		{"LF in value", ResponseHead{Status: 200, Headers: []Header{hdr("X", "a\nb")}}, ErrInvalidHeader},
		{"CR in value", ResponseHead{Status: 200, Headers: []Header{hdr("X", "a\rb")}}, ErrInvalidHeader},
		{"NUL in value", ResponseHead{Status: 200, Headers: []Header{hdr("X", "a\x00b")}}, ErrInvalidHeader},
		{"control in value", ResponseHead{Status: 200, Headers: []Header{hdr("X", "a\x7f")}}, ErrInvalidHeader},
		{"CRLF in name", ResponseHead{Status: 200, Headers: []Header{hdr("X\r\nY", "a")}}, ErrInvalidHeader},
		{"colon in name", ResponseHead{Status: 200, Headers: []Header{hdr("X:", "a")}}, ErrInvalidHeader},
		{"space in name", ResponseHead{Status: 200, Headers: []Header{hdr("X Y", "a")}}, ErrInvalidHeader},
		{"empty name", ResponseHead{Status: 200, Headers: []Header{hdr("", "a")}}, ErrInvalidHeader},
		{"user Content-Length", ResponseHead{Status: 200, Headers: []Header{hdr("content-length", "5")}}, ErrInvalidHeader},
		{"user Transfer-Encoding", ResponseHead{Status: 200, Headers: []Header{hdr("Transfer-Encoding", "chunked")}}, ErrInvalidHeader},
		{"CRLF in date", ResponseHead{Status: 200, Date: []byte("x\r\nY: z")}, ErrInvalidHeader},
		{"status 99", ResponseHead{Status: 99}, ErrInvalidStatus},
		{"status 1000", ResponseHead{Status: 1000}, ErrInvalidStatus},
		{"status 0", ResponseHead{}, ErrInvalidStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := AppendResponseHead([]byte("keep"), &tt.h)
			if err != tt.err || string(out) != "keep" {
				t.Fatalf("got %q, %v", out, err)
			}
		})
	}
}

func TestAppendResponseHeadAllocs(t *testing.T) {
	var d Date
	d.Update(time.Now())
	h := ResponseHead{Status: 200, ContentLength: 1234, Date: d.Bytes(), Close: true,
		Headers: []Header{hdr("Content-Type", "application/json"), hdr("Server", "baton")}}
	buf := make([]byte, 0, 512)
	allocs := testing.AllocsPerRun(100, func() {
		out, err := AppendResponseHead(buf[:0], &h)
		if err != nil {
			t.Fatal(err)
		}
		out = AppendChunk(out, []byte("abc"))
		out = AppendFinalChunk(out)
		out = AppendContinue(out)
		d.Update(time.Unix(0, 0))
		_ = out
	})
	if allocs != 0 {
		t.Fatalf("%v allocs", allocs)
	}
}

func TestResponseParsesWithStdlib(t *testing.T) {
	// What we write, net/http reads back.
	var d Date
	d.Update(time.Date(2024, 6, 11, 9, 30, 0, 0, time.UTC))
	h := ResponseHead{Status: 201, Date: d.Bytes(), Chunked: true, Close: true,
		Headers: []Header{hdr("Content-Type", "text/plain"), hdr("X-Multi", "1"), hdr("X-Multi", "2")}}
	out, err := AppendResponseHead(nil, &h)
	if err != nil {
		t.Fatal(err)
	}
	out = AppendChunk(out, []byte("hello, "))
	out = AppendChunk(out, nil)
	out = AppendChunk(out, []byte("world"))
	out = AppendFinalChunk(out)
	resp, body := readStdlibResponse(t, out)
	if resp.StatusCode != 201 || resp.Status != "201 Created" || !resp.Close || body != "hello, world" ||
		resp.Header.Get("Date") != "Tue, 11 Jun 2024 09:30:00 GMT" || len(resp.Header["X-Multi"]) != 2 ||
		len(resp.TransferEncoding) != 1 {
		t.Fatalf("resp %+v body %q", resp, body)
	}
}

func TestAppendChunk(t *testing.T) {
	if got := string(AppendChunk([]byte("x"), make([]byte, 0x1af))); got[:7] != "x1af\r\n\x00" || got[len(got)-2:] != "\r\n" || len(got) != 1+5+0x1af+2 {
		t.Fatalf("got %q...", got[:10])
	}
	if got := string(AppendChunk(nil, nil)); got != "" {
		t.Fatalf("empty chunk: %q", got)
	}
	if got := string(AppendFinalChunk(nil)); got != "0\r\n\r\n" {
		t.Fatalf("final: %q", got)
	}
	if got := string(AppendContinue(nil)); got != "HTTP/1.1 100 Continue\r\n\r\n" {
		t.Fatalf("continue: %q", got)
	}
}

func TestDate(t *testing.T) {
	var d Date
	if d.Bytes() != nil {
		t.Fatal("zero Date must be empty")
	}
	loc := time.FixedZone("X", 5*3600)
	tm := time.Date(2024, 2, 29, 23, 59, 7, 0, loc)
	d.Update(tm)
	if got, want := string(d.Bytes()), tm.UTC().Format(http.TimeFormat); got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestStatusText(t *testing.T) {
	renamed := map[int]string{413: "Content Too Large", 414: "URI Too Long", 416: "Range Not Satisfiable", 422: "Unprocessable Content"}
	for code := 0; code < 1000; code++ {
		want := http.StatusText(code)
		if r, ok := renamed[code]; ok {
			want = r
		}
		if got := StatusText(code); got != want {
			t.Errorf("StatusText(%d) = %q, want %q", code, got, want)
		}
	}
}

func TestValidHeaderNameValue(t *testing.T) {
	for _, n := range []string{"X", "Content-Type", "!#$%&'*+-.^_`|~09azAZ"} {
		if !ValidHeaderName([]byte(n)) {
			t.Errorf("%q should be valid", n)
		}
	}
	for _, n := range []string{"", "a b", "a:b", "a\r", "(x)", "é", "a\x00"} {
		if ValidHeaderName([]byte(n)) {
			t.Errorf("%q should be invalid", n)
		}
	}
	for _, v := range []string{"", " a ", "a\tb", "\x80\xff", "~!\"#", "0123456789abcdefghij"} {
		if !ValidHeaderValue([]byte(v)) {
			t.Errorf("%q should be valid", v)
		}
	}
	for _, v := range []string{"\r", "\n", "\x00", "a\x1f", "\x7f", "0123456789abcdef\nx"} {
		if ValidHeaderValue([]byte(v)) {
			t.Errorf("%q should be invalid", v)
		}
	}
}

func TestDateOutOfRange(t *testing.T) {
	var d Date
	d.Update(time.Date(12345, 1, 1, 0, 0, 0, 0, time.UTC))
	if d.Bytes() != nil {
		t.Fatalf("year 12345: %q", d.Bytes())
	}
	d.Update(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	if string(d.Bytes()) != "Sat, 01 Jan 2000 00:00:00 GMT" {
		t.Fatalf("%q", d.Bytes())
	}
}
