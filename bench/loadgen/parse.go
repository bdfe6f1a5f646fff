package loadgen

import (
	"bytes"
	"errors"
	"io"
)

// Errors of the response parser.
var (
	errProtocol = errors.New("loadgen: malformed HTTP response")
	errTooLarge = errors.New("loadgen: response head too large")
)

const (
	initialReadBuf = 4 << 10  // per-connection read buffer
	maxHeadBytes   = 64 << 10 // longest response head accepted
)

var crlfcrlf = []byte("\r\n\r\n")

// respReader reads HTTP/1.1 responses from a stream with one reusable buffer and no
// allocation per response: it parses the status line and the framing headers
// (Content-Length, Transfer-Encoding: chunked, Connection) and skips bodies.
type respReader struct {
	r          io.Reader
	buf        []byte
	start, end int // unread bytes are buf[start:end]
}

func newRespReader(r io.Reader) *respReader {
	return &respReader{r: r, buf: make([]byte, initialReadBuf)}
}

// reset discards buffered bytes and reads from r from now on (after a reconnect).
func (p *respReader) reset(r io.Reader) {
	p.r = r
	p.start, p.end = 0, 0
}

// fill reads more bytes, compacting or growing the buffer as needed.
func (p *respReader) fill() error {
	if p.start == p.end {
		p.start, p.end = 0, 0
	}
	if p.end == len(p.buf) {
		if p.start > 0 {
			n := copy(p.buf, p.buf[p.start:p.end])
			p.start, p.end = 0, n
		} else {
			if len(p.buf) >= maxHeadBytes {
				return errTooLarge
			}
			nb := make([]byte, 2*len(p.buf))
			copy(nb, p.buf[:p.end])
			p.buf = nb
		}
	}
	n, err := p.r.Read(p.buf[p.end:])
	p.end += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// next reads one complete response and returns its status code and whether the server
// will close the connection after it.
func (p *respReader) next() (status int, closeConn bool, err error) {
	var headEnd int
	for {
		if i := bytes.Index(p.buf[p.start:p.end], crlfcrlf); i >= 0 {
			headEnd = p.start + i + 4
			break
		}
		if err := p.fill(); err != nil {
			return 0, true, err
		}
	}
	head := p.buf[p.start:headEnd]
	// "HTTP/1.1 200 OK\r\n": version, space, three digits.
	if len(head) < 16 || !bytes.HasPrefix(head, []byte("HTTP/1.")) || head[8] != ' ' {
		return 0, true, errProtocol
	}
	for _, d := range head[9:12] {
		if d < '0' || d > '9' {
			return 0, true, errProtocol
		}
	}
	status = int(head[9]-'0')*100 + int(head[10]-'0')*10 + int(head[11]-'0')
	closeConn = head[7] == '0' // HTTP/1.0 closes unless it says keep-alive
	contentLength, chunked := -1, false

	line := head[bytes.IndexByte(head, '\n')+1:]
	for len(line) > 2 {
		eol := bytes.IndexByte(line, '\n')
		if eol < 0 {
			return 0, true, errProtocol
		}
		h := line[:eol]
		line = line[eol+1:]
		colon := bytes.IndexByte(h, ':')
		if colon <= 0 {
			return 0, true, errProtocol
		}
		name, value := h[:colon], bytes.TrimSpace(h[colon+1:])
		switch {
		case asciiEqualFold(name, "content-length"):
			n, ok := parseDecimal(value)
			if !ok {
				return 0, true, errProtocol
			}
			contentLength = n
		case asciiEqualFold(name, "transfer-encoding"):
			chunked = asciiContainsFold(value, "chunked")
		case asciiEqualFold(name, "connection"):
			if asciiContainsFold(value, "close") {
				closeConn = true
			} else if asciiContainsFold(value, "keep-alive") {
				closeConn = false
			}
		}
	}
	p.start = headEnd

	switch {
	case status/100 == 1 || status == 204 || status == 304:
		return status, closeConn, nil
	case chunked:
		return status, closeConn, p.skipChunked()
	case contentLength >= 0:
		return status, closeConn, p.skip(contentLength)
	default: // body delimited by the end of the connection
		for {
			p.start, p.end = 0, 0
			if err := p.fill(); err != nil {
				if err == io.EOF {
					return status, true, nil
				}
				return status, true, err
			}
		}
	}
}

// skip consumes n body bytes.
func (p *respReader) skip(n int) error {
	for {
		avail := p.end - p.start
		if avail >= n {
			p.start += n
			return nil
		}
		n -= avail
		p.start, p.end = 0, 0
		if err := p.fill(); err != nil {
			return eofIsUnexpected(err)
		}
	}
}

// line returns the next CRLF-terminated line (without CRLF), valid until the next read.
func (p *respReader) line() ([]byte, error) {
	for {
		if i := bytes.IndexByte(p.buf[p.start:p.end], '\n'); i >= 0 {
			l := p.buf[p.start : p.start+i]
			p.start += i + 1
			return bytes.TrimSuffix(l, []byte("\r")), nil
		}
		if err := p.fill(); err != nil {
			return nil, eofIsUnexpected(err)
		}
	}
}

// skipChunked consumes a chunked body, trailers included.
func (p *respReader) skipChunked() error {
	for {
		l, err := p.line()
		if err != nil {
			return err
		}
		if i := bytes.IndexByte(l, ';'); i >= 0 {
			l = l[:i]
		}
		size, ok := parseHex(bytes.TrimSpace(l))
		if !ok {
			return errProtocol
		}
		if size == 0 {
			for { // trailers up to the empty line
				t, err := p.line()
				if err != nil {
					return err
				}
				if len(t) == 0 {
					return nil
				}
			}
		}
		if err := p.skip(size + 2); err != nil {
			return err
		}
	}
}

func eofIsUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func parseDecimal(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func parseHex(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 12 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// asciiEqualFold reports whether b equals the lower-case ASCII string s, ignoring case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

// asciiContainsFold reports whether b contains the lower-case ASCII string s, ignoring case.
func asciiContainsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if asciiEqualFold(b[i:i+len(s)], s) {
			return true
		}
	}
	return false
}
