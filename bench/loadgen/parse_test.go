package loadgen

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestRespReader(t *testing.T) {
	stream := "HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, World!" +
		"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n" +
		"HTTP/1.1 204 No Content\r\n\r\n" +
		"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbusy" +
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok" +
		"HTTP/1.0 200 OK\r\n\r\nuntil the end"
	want := []struct {
		status int
		close  bool
	}{{200, false}, {404, false}, {200, false}, {204, false}, {503, true}, {200, false}, {200, true}}
	for _, name := range []string{"whole", "one-byte"} {
		var r io.Reader = strings.NewReader(stream)
		if name == "one-byte" {
			r = iotest.OneByteReader(r)
		}
		p := newRespReader(r)
		for i, w := range want {
			status, closeConn, err := p.next()
			if err != nil || status != w.status || closeConn != w.close {
				t.Fatalf("%s: response %d: got %d close=%v err=%v, want %d close=%v", name, i, status, closeConn, err, w.status, w.close)
			}
		}
		if _, _, err := p.next(); err != io.EOF {
			t.Fatalf("%s: after the last response: err=%v, want EOF", name, err)
		}
	}
}

func TestRespReaderErrors(t *testing.T) {
	for _, in := range []string{
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"SMTP 220 hello\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
		"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	} {
		if _, _, err := newRespReader(strings.NewReader(in)).next(); err != errProtocol {
			t.Errorf("%q: err=%v, want errProtocol", in, err)
		}
	}
	if _, _, err := newRespReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")).next(); err != io.ErrUnexpectedEOF {
		t.Errorf("truncated body: err=%v", err)
	}
	huge := "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHeadBytes) + "\r\n\r\n"
	if _, _, err := newRespReader(strings.NewReader(huge)).next(); err != errTooLarge {
		t.Errorf("huge head: err=%v", err)
	}
}

func TestRespReaderAllocs(t *testing.T) {
	one := "HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, World!"
	r := &repeatReader{s: one}
	p := newRespReader(r)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, _, err := p.next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per response, want 0", allocs)
	}
}

// repeatReader returns s forever.
type repeatReader struct {
	s   string
	off int
}

func (r *repeatReader) Read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		c := copy(b[n:], r.s[r.off:])
		n += c
		r.off = (r.off + c) % len(r.s)
	}
	return n, nil
}
