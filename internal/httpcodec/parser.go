package httpcodec

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
)

// Target forms (RFC 9112 §3.2).
const (
	formOrigin    = iota // "/path?query"
	formAbsolute         // "http://host/path?query"
	formAsterisk         // "*", OPTIONS only
	formAuthority        // "host:port", CONNECT only
)

// Parser parses request heads incrementally. The zero value is ready to use
// with the default Config; call Init (or use NewParser) for other limits. A
// Parser belongs to one connection and must be used from one goroutine at a
// time; it keeps the progress of a partly received head between calls and
// forgets it when it returns a head or an error.
type Parser struct {
	cfg    Config
	inited bool

	// Progress through the current head.
	skip  int      // bytes of empty lines skipped before the request line
	pos   int      // start of the current line (from buf[skip:])
	scan  int      // next byte of the current line to examine
	colon int      // offset of the current field line's colon, -1 before it
	lines int      // complete lines so far; 0 = request line pending
	base  *byte    // &buf[0] at the last call, to notice a moved buffer
	cap   int      // cap(buf) at the last call
	req   *Request // req at the last call

	// Request line.
	methodEnd  int
	targetBeg  int
	targetEnd  int
	pathBeg    int
	pathEnd    int
	queryBeg   int // -1: no '?'
	form       int
	protoMinor int

	// Fields and what they say.
	nfields       int // fields parsed so far, in req.Headers
	hostIdx       int // index in req.Headers of the Host header, -1 if none
	clIdx         int // index of the first Content-Length, -1 if none
	upgradeIdx    int // index of the first Upgrade, -1 if none
	cl            int64
	teSeen        bool
	teBad         bool
	teElems       int
	teChunked     int
	teLastChunked bool
	teUnknown     bool
	connClose     bool
	connKeepAlive bool
	connUpgrade   bool
	expect100     bool
	expectOther   bool
}

// NewParser returns a Parser with the given limits. It is the same as
// calling Init on a zero Parser.
func NewParser(cfg Config) *Parser {
	p := new(Parser)
	p.Init(cfg)
	return p
}

// Init sets the limits and forgets any partly parsed head. Zero fields of
// cfg take their defaults.
func (p *Parser) Init(cfg Config) {
	p.cfg = cfg.normalized()
	if p.cfg.MaxHeaderBytes > MaxHeadBytesLimit {
		p.cfg.MaxHeaderBytes = MaxHeadBytesLimit
	}
	if p.cfg.MaxRequestLineBytes > p.cfg.MaxHeaderBytes {
		p.cfg.MaxRequestLineBytes = p.cfg.MaxHeaderBytes
	}
	p.inited = true
	p.Reset()
}

// Config returns the limits in use, defaults filled in.
func (p *Parser) Config() Config {
	if !p.inited {
		p.Init(Config{})
	}
	return p.cfg
}

// Reset forgets any partly parsed head, so that the next ParseHead starts
// from the first byte of its buffer. ParseHead does this itself after a
// complete head or an error; call Reset when the connection's buffered
// bytes are discarded by other means.
func (p *Parser) Reset() {
	p.skip, p.pos, p.scan, p.colon, p.lines = 0, 0, 0, -1, 0
	p.base, p.req = nil, nil
	p.nfields = 0
	p.hostIdx, p.clIdx, p.upgradeIdx = -1, -1, -1
	p.cl = 0
	p.teSeen, p.teBad, p.teElems, p.teChunked, p.teLastChunked, p.teUnknown = false, false, 0, 0, false, false
	p.connClose, p.connKeepAlive, p.connUpgrade = false, false, false
	p.expect100, p.expectOther = false, false
}

// needMore is the internal "incomplete" result of the line parsers.
var needMore = &Error{}

// ParseHead parses the request head at the start of buf.
//
// buf must hold all the connection's unconsumed bytes, starting at the
// first byte of the request. Up to MaxLeadingEmptyLines empty lines (CRLF)
// before the request line are skipped and counted in n and req.HeadLen, so
// that discarding n bytes discards them too; while buf holds only such
// CRLFs ParseHead returns ErrNeedMore, and the next CRLF after
// MaxLeadingEmptyLines of them is an error, so at most
// 2*MaxLeadingEmptyLines bytes of them wait in the buffer.
//
// If the head is not complete, ParseHead returns ErrNeedMore and
// remembers how far it got: call it again when more bytes have arrived,
// with a buffer that starts with the same bytes (it may be a different,
// larger slice) and the same req; the bytes already examined are not
// examined again. Limits are enforced as soon as the bytes received
// exceed them, before the head is complete.
//
// On success it fills req (whose views then point into buf) and returns
// n = req.HeadLen, the number of bytes of the head (skipped empty lines
// included); the body, if any, and any pipelined request follow at
// buf[n:]. On failure it returns a *Error
// whose Status is the code to answer before closing the connection. Until
// ParseHead succeeds, req's contents are unspecified (it may be partly
// written). After success or error the Parser is ready for the next request.
//
// Errors do not depend on how the bytes were split across calls: feeding a
// head in pieces gives the same result as feeding it whole.
func (p *Parser) ParseHead(buf []byte, req *Request) (n int, err error) {
	if !p.inited {
		p.Init(Config{})
	}
	if p.lines == 0 && p.scan == 0 && p.skip == 0 {
		if n, ok := p.parseWhole(buf, req); ok {
			return n, nil
		}
	}
	return p.parseHead(buf, req)
}

// parseHead is ParseHead's general path: any head, whole or in pieces.
func (p *Parser) parseHead(buf []byte, req *Request) (n int, err error) {
	if p.skip+p.scan > len(buf) {
		// Not the same prefix: the caller broke the contract. Start over
		// rather than index out of range.
		p.Reset()
	}
	if p.lines == 0 && p.scan == 0 {
		// The request line has not started: skip the empty lines before it
		// (RFC 9112 §2.2).
		if e := p.skipEmptyLines(buf); e != nil {
			if e == needMore {
				return 0, ErrNeedMore
			}
			p.Reset()
			return 0, e
		}
	}
	skip := p.skip
	buf = buf[skip:]
	if p.lines == 0 {
		e := p.requestLine(buf)
		if e == needMore {
			return 0, ErrNeedMore
		}
		if e != nil {
			p.Reset()
			return 0, e
		}
		req.Headers = req.Headers[:0]
	} else if p.nfields > 0 && (p.base != &buf[0] || p.req != req) {
		p.rebase(buf, req)
	}
	p.base, p.cap, p.req = &buf[0], cap(buf), req
	end, e := p.fieldLines(buf, req)
	if e == needMore {
		return 0, ErrNeedMore
	}
	p.Reset()
	if e != nil {
		return 0, e
	}
	req.HeadLen += skip
	return skip + end, nil
}

// MaxLeadingEmptyLines is how many empty lines (CRLF) ParseHead skips
// before a request line. RFC 9112 §2.2 asks servers to ignore at least one,
// for clients that end a POST body with an extra CRLF; a longer run is not
// a client bug but a way to hold the connection, so the next empty line is
// answered with 400. Bare LF and bare CR are rejected here as everywhere
// else.
const MaxLeadingEmptyLines = 8

// skipEmptyLines advances p.skip over the CRLFs at the start of buf. It
// returns nil when buf[p.skip] starts the request line, needMore when buf
// ends before that, or the error for the byte that is neither.
func (p *Parser) skipEmptyLines(buf []byte) *Error {
	i := p.skip
	for {
		if i >= len(buf) {
			p.skip = i
			return needMore
		}
		switch buf[i] {
		case '\r':
			if i >= 2*MaxLeadingEmptyLines {
				return errManyEmptyLines
			}
			if i+1 >= len(buf) {
				p.skip = i
				return needMore
			}
			if buf[i+1] != '\n' {
				return errBareCR
			}
			i += 2
		case '\n':
			return errBareLF
		default:
			p.skip = i
			return nil
		}
	}
}

// rebase re-points the header views made by earlier calls (in
// p.req.Headers) into buf and stores them in req.Headers. The views are
// two-index slices of the previous buffer, so each one's offset in it is
// that buffer's capacity minus the view's.
func (p *Parser) rebase(buf []byte, req *Request) {
	old := p.req.Headers[:p.nfields]
	hs := req.Headers[:0]
	if req == p.req {
		hs = old[:0] // rewritten in place, each entry after it is read
	}
	for _, h := range old {
		n, v := p.cap-cap(h.Name), p.cap-cap(h.Value)
		hs = append(hs, Header{Name: buf[n : n+len(h.Name)], Value: buf[v : v+len(h.Value)]})
	}
	req.Headers = hs
}

// requestLine finds and parses the request line. Its length is checked
// before its content, so the search never looks past MaxRequestLineBytes.
func (p *Parser) requestLine(buf []byte) *Error {
	if !isTchar[buf[0]] {
		// Fail fast on bytes that cannot start a request (TLS handshakes,
		// binary junk, empty lines).
		return errBadRequestLine
	}
	lim := min(len(buf), p.cfg.MaxRequestLineBytes)
	i := bytes.IndexByte(buf[p.scan:lim], '\n')
	if i < 0 {
		p.scan = lim
		if len(buf) >= p.cfg.MaxRequestLineBytes {
			return errRequestLineLong
		}
		return needMore
	}
	lf := p.scan + i
	if lf == 0 || buf[lf-1] != '\r' {
		return errBareLF
	}
	if e := p.parseRequestLine(buf[:lf-1]); e != nil {
		return e
	}
	p.lines = 1
	p.pos, p.scan, p.colon = lf+1, lf+1, -1
	return nil
}

// fieldLines parses field lines from p.pos up to the empty line, appending
// them to req.Headers, and returns the head length. Bytes are examined in
// order, each once, and never at or past MaxHeaderBytes, so the result does
// not depend on how the input was split.
func (p *Parser) fieldLines(buf []byte, req *Request) (int, *Error) {
	n, hs, e := p.fieldLoop(buf, req.Headers)
	req.Headers = hs
	if e == nil {
		e = p.finish(buf, n, req)
	}
	return n, e
}

// fieldLoop does the work of fieldLines on a local copy of the headers
// slice.
func (p *Parser) fieldLoop(buf []byte, hs []Header) (int, []Header, *Error) {
	max := p.cfg.MaxHeaderBytes
	limit := min(len(buf), max)
	for {
		i := p.scan
		if p.colon < 0 {
			if i == p.pos {
				if i >= limit {
					return 0, hs, p.exhausted(limit)
				}
				switch buf[i] {
				case '\r':
					// The empty line that ends the head.
					if i+1 >= max {
						return 0, hs, errHeadTooLarge
					}
					if i+1 >= len(buf) {
						return 0, hs, needMore
					}
					if buf[i+1] != '\n' {
						return 0, hs, errBareCR
					}
					return i + 2, hs, nil
				case '\n':
					return 0, hs, errBareLF
				case ' ', '\t':
					return 0, hs, errLeadingWS
				}
				if p.nfields >= p.cfg.MaxHeaderCount {
					return 0, hs, errTooManyHeaders
				}
			}
			for i < limit && isTchar[buf[i]] {
				i++
			}
			if i == limit {
				p.scan = i
				return 0, hs, p.exhausted(limit)
			}
			if buf[i] != ':' || i == p.pos {
				return 0, hs, errBadHeaderName
			}
			p.colon = i
			i++
		}
		// Field value: skip 8 plain bytes at a time, then byte by byte.
		for i+8 <= limit && !hasCtl(binary.LittleEndian.Uint64(buf[i:])) {
			i += 8
		}
		for i < limit && isValueChar[buf[i]] {
			i++
		}
		if i == limit {
			p.scan = i
			return 0, hs, p.exhausted(limit)
		}
		switch {
		case buf[i] == '\n':
			return 0, hs, errBareLF
		case buf[i] != '\r':
			return 0, hs, errBadHeaderValue
		case i+1 >= max:
			return 0, hs, errHeadTooLarge
		case i+1 >= len(buf):
			p.scan = i
			return 0, hs, needMore
		case buf[i+1] != '\n':
			return 0, hs, errBareCR
		}
		var e *Error
		if hs, e = p.field(buf[p.pos:i], hs, p.colon-p.pos); e != nil {
			return 0, hs, e
		}
		p.lines++
		p.pos, p.scan, p.colon = i+2, i+2, -1
	}
}

// exhausted is the result of running out of bytes at limit in the middle
// of a line: 431 if limit is MaxHeaderBytes, else "need more".
func (p *Parser) exhausted(limit int) *Error {
	if limit >= p.cfg.MaxHeaderBytes {
		return errHeadTooLarge
	}
	return needMore
}

// hasCtl reports whether any of the 8 bytes packed in x is below 0x20 or is
// 0x7F (DEL): the bytes that are not plain field-value bytes.
func hasCtl(x uint64) bool { return ctlBits(x) != 0 }

// ctlBits has the high bit set of the bytes of x that hasCtl looks for. The lowest one set
// is exact (a borrow only runs upwards from a byte that is itself set), so
// bits.TrailingZeros64(ctlBits(x))/8 is the index of the first such byte; higher ones may
// be set for bytes that are not.
func ctlBits(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	y := x ^ (0x7f * lo)
	return ((x-0x20*lo)&^x | (y-lo)&^y) & hi
}

// parseRequestLine parses line (the request line without its CRLF, which
// starts at offset 0 of the buffer).
func (p *Parser) parseRequestLine(line []byte) *Error {
	// method SP
	i := 0
	for i < len(line) && isTchar[line[i]] {
		i++
	}
	if i == len(line) {
		return errBadRequestLine
	}
	if line[i] != ' ' {
		return errBadMethod
	}
	p.methodEnd = i
	method := line[:i]

	// request-target SP
	tb := i + 1
	j := tb + validTargetPrefix(line[tb:])
	if j == len(line) {
		return errBadRequestLine
	}
	if j == tb || line[j] != ' ' {
		return errBadTarget
	}
	p.targetBeg, p.targetEnd = tb, j

	// HTTP-version
	switch v := line[j+1:]; string(v) {
	case "HTTP/1.1":
		p.protoMinor = 1
	case "HTTP/1.0":
		p.protoMinor = 0
	default:
		if len(v) == 8 && string(v[:5]) == "HTTP/" && v[6] == '.' &&
			isDigit(v[5]) && isDigit(v[7]) {
			return errVersion
		}
		return errBadVersion
	}

	return p.parseTarget(line, method, tb, j)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// parseTarget classifies and checks the request-target line[tb:te].
func (p *Parser) parseTarget(line, method []byte, tb, te int) *Error {
	t := line[tb:te]
	p.queryBeg = -1
	switch {
	case string(method) == "CONNECT":
		// authority-form: uri-host ":" port
		if !validAuthority(t, true) {
			return errBadTarget
		}
		p.form = formAuthority
		return nil
	case t[0] == '/':
		p.form = formOrigin
		return p.splitPath(line, tb, te)
	case len(t) == 1 && t[0] == '*':
		if string(method) != "OPTIONS" {
			return errAsteriskNotOpts
		}
		p.form = formAsterisk
		p.pathBeg, p.pathEnd = tb, te
		return nil
	}
	// absolute-form: scheme "://" authority [ path-abempty ] [ "?" query ]
	k := 0
	if !isAlpha(t[0]) {
		return errBadTarget
	}
	for k < len(t) && (isAlpha(t[k]) || isDigit(t[k]) || t[k] == '+' || t[k] == '-' || t[k] == '.') {
		k++
	}
	if len(t)-k < 3 || string(t[k:k+3]) != "://" {
		return errBadTarget
	}
	as := k + 3
	ae := as
	for ae < len(t) && t[ae] != '/' && t[ae] != '?' {
		ae++
	}
	if !validAuthority(t[as:ae], false) {
		return errBadTarget
	}
	p.form = formAbsolute
	return p.splitPath(line, tb+ae, te)
}

func isAlpha(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// splitPath records the path line[pb:q] and the query after the first '?'
// of line[pb:te], and checks the path's percent-encodings.
func (p *Parser) splitPath(line []byte, pb, te int) *Error {
	pe := te
	if q := bytes.IndexByte(line[pb:te], '?'); q >= 0 {
		pe = pb + q
		p.queryBeg = pe + 1
	}
	p.pathBeg, p.pathEnd = pb, pe
	path := line[pb:pe]
	for i := bytes.IndexByte(path, '%'); i >= 0; {
		if i+2 >= len(path) || unhex[path[i+1]] == 0xff || unhex[path[i+2]] == 0xff {
			return errBadTarget
		}
		path = path[i+3:]
		i = bytes.IndexByte(path, '%')
	}
	return nil
}

// validAuthority checks host [ ":" port ] where host is a reg-name without
// percent-encoding or a bracketed IPv6 address and port is digits. With
// needPort (CONNECT), the port is required and non-empty. Userinfo is
// rejected (RFC 9110 §4.2.4).
func validAuthority(a []byte, needPort bool) bool {
	i := 0
	if len(a) > 0 && a[0] == '[' {
		i = 1
		for i < len(a) && (unhex[a[i]] != 0xff || a[i] == ':' || a[i] == '.') {
			i++
		}
		if i == len(a) || a[i] != ']' || !validIPv6(a[1:i]) {
			return false
		}
		i++
	} else {
		for i < len(a) && isRegNameChar[a[i]] {
			i++
		}
		if i == 0 {
			return false
		}
	}
	if i == len(a) {
		return !needPort
	}
	if a[i] != ':' {
		return false
	}
	i++
	if needPort && i == len(a) {
		return false
	}
	for ; i < len(a); i++ {
		if !isDigit(a[i]) {
			return false
		}
	}
	return true
}

// validIPv6 reports whether b (hex digits, ':' and '.') is an IPv6 address.
// Only absolute-form and CONNECT targets with an IP literal get here.
func validIPv6(b []byte) bool {
	ip, err := netip.ParseAddr(string(b))
	return err == nil && ip.Is6()
}

// field records the complete field line (without its CRLF), whose colon is at
// line[colon], in hs and applies the rules of the fields the codec interprets.
// line is a two-index slice of the parser's buffer, and so are the views (see
// rebase). Eight words of arguments: with more, some go on the stack.
func (p *Parser) field(line []byte, hs []Header, colon int) ([]Header, *Error) {
	name, v := line[:colon], line[colon+1:]
	vs, ve := 0, len(v)
	for vs < ve && (v[vs] == ' ' || v[vs] == '\t') {
		vs++
	}
	for ve > vs && (v[ve-1] == ' ' || v[ve-1] == '\t') {
		ve--
	}
	value := v[vs:ve]
	idx := len(hs)
	if idx == cap(hs) {
		hs = growHeaders(hs)
	}
	hs = hs[:idx+1]
	hs[idx] = Header{Name: name, Value: value}
	p.nfields++

	if len(name) == 4 {
		// equalFoldLower(name, "host"), a word at a time.
		if binary.LittleEndian.Uint32(name)|0x20202020 == 'h'|'o'<<8|'s'<<16|'t'<<24 {
			if p.hostIdx >= 0 {
				return hs, errManyHosts
			}
			for _, c := range value {
				if !isHostChar[c] {
					return hs, errBadHost
				}
			}
			p.hostIdx = idx
		}
		return hs, nil
	}
	if len(name) < 64 && fieldRuleLens&(1<<len(name)) != 0 {
		return hs, p.fieldRule(hs, name, value, idx)
	}
	return hs, nil
}

// fieldRuleLens has bit n set for the lengths of the field names fieldRule interprets.
const fieldRuleLens = 1<<6 | 1<<7 | 1<<10 | 1<<14 | 1<<17

// growHeaders makes room for one more header in hs. Out of line, as fieldRule: field
// runs for every field line, and the code it rarely needs stays off its path.
//
//go:noinline
func growHeaders(hs []Header) []Header { return slices.Grow(hs, 1) }

// fieldRule applies the rules of the fields the codec interprets, Host aside: Expect,
// Upgrade, Connection, Content-Length, Transfer-Encoding. hs[idx] is the field.
//
//go:noinline
func (p *Parser) fieldRule(hs []Header, name, value []byte, idx int) *Error {
	switch len(name) {
	case 6:
		if equalFoldLower(name, "expect") {
			p.parseExpect(value)
		}
	case 7:
		if equalFoldLower(name, "upgrade") && p.upgradeIdx < 0 {
			p.upgradeIdx = idx
		}
	case 10:
		if equalFoldLower(name, "connection") {
			p.parseConnection(value)
		}
	case 14:
		if equalFoldLower(name, "content-length") {
			return p.parseContentLength(hs, value, idx)
		}
	case 17:
		if equalFoldLower(name, "transfer-encoding") {
			p.parseTransferEncoding(value)
		}
	}
	return nil
}

// parseContentLength checks a Content-Length value: 1*DIGIT, within int64,
// and byte-for-byte equal to any earlier Content-Length.
func (p *Parser) parseContentLength(hs []Header, v []byte, idx int) *Error {
	if p.clIdx >= 0 {
		if !bytes.Equal(hs[p.clIdx].Value, v) {
			return errManyContentLength
		}
		return nil
	}
	if len(v) == 0 {
		return errBadContentLength
	}
	var n int64
	for _, c := range v {
		if !isDigit(c) {
			return errBadContentLength
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return errBadContentLength
		}
		n = n*10 + d
	}
	p.cl, p.clIdx = n, idx
	return nil
}

// nextElem splits the comma-separated list v into its first element
// (OWS-trimmed) and the rest.
func nextElem(v []byte) (elem, rest []byte) {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		return trimOWS(v[:i]), v[i+1:]
	}
	return trimOWS(v), nil
}

func (p *Parser) parseConnection(v []byte) {
	for len(v) > 0 {
		var e []byte
		e, v = nextElem(v)
		switch len(e) {
		case 5:
			if equalFoldLower(e, "close") {
				p.connClose = true
			}
		case 7:
			if equalFoldLower(e, "upgrade") {
				p.connUpgrade = true
			}
		case 10:
			if equalFoldLower(e, "keep-alive") {
				p.connKeepAlive = true
			}
		}
	}
}

// parseExpect records an Expect field. A value other than a list of
// "100-continue" (empty elements aside) is an expectation we cannot meet.
func (p *Parser) parseExpect(v []byte) {
	found := false
	other := false
	for rest := v; len(rest) > 0; {
		var e []byte
		e, rest = nextElem(rest)
		switch {
		case len(e) == 0:
		case equalFoldLower(e, "100-continue"):
			found = true
		default:
			other = true
		}
	}
	if found {
		p.expect100 = true
	}
	if other || len(v) > 0 && !found {
		p.expectOther = true
	}
}

// parseTransferEncoding records the codings of one Transfer-Encoding
// field; finish decides. transfer-coding = token *( OWS ";" OWS param ).
func (p *Parser) parseTransferEncoding(v []byte) {
	p.teSeen = true
	for more := true; more; {
		e := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			e, v = v[:i], v[i+1:]
		} else {
			more = false
		}
		e = trimOWS(e)
		p.teElems++
		if len(e) == 0 {
			// RFC 9110 §5.6.1 lets recipients skip empty list elements,
			// but in the field that decides the framing only the plain
			// form is accepted, as nginx and net/http do.
			p.teBad = true
			return
		}
		k := 0
		for k < len(e) && isTchar[e[k]] {
			k++
		}
		if k == 0 {
			p.teBad = true
			return
		}
		if k < len(e) {
			// Parameters: the coding is not plain "chunked", so it is one
			// we do not implement.
			if r := trimOWS(e[k:]); len(r) == 0 || r[0] != ';' {
				p.teBad = true
				return
			}
			p.teUnknown = true
			p.teLastChunked = false
			continue
		}
		if equalFoldLower(e, "chunked") {
			p.teChunked++
			p.teLastChunked = true
		} else {
			p.teUnknown = true
			p.teLastChunked = false
		}
	}
}

// finish applies the whole-head rules and fills req. end is the head length.
// parseWhole fills req itself, from its locals, after the same rules.
func (p *Parser) finish(buf []byte, end int, req *Request) *Error {
	cl, chunked, e := p.headRules()
	if e != nil {
		return e
	}

	// The views are worked out first and stored together, so that the compiler checks for
	// the write barrier once for all of them.
	var path, rawQuery, host, upgrade []byte
	if p.form != formAuthority {
		path = buf[p.pathBeg:p.pathEnd:p.pathEnd]
	}
	if p.queryBeg >= 0 {
		rawQuery = buf[p.queryBeg:p.targetEnd:p.targetEnd]
	}
	hs := req.Headers
	if p.hostIdx >= 0 {
		host = hs[p.hostIdx].Value
	}
	if p.connUpgrade && p.upgradeIdx >= 0 {
		upgrade = hs[p.upgradeIdx].Value
	}
	req.Method = buf[0:p.methodEnd:p.methodEnd]
	req.Target = buf[p.targetBeg:p.targetEnd:p.targetEnd]
	req.Path, req.RawQuery, req.Host, req.Upgrade = path, rawQuery, host, upgrade
	p.fillFlags(req, cl, chunked, end)
	return nil
}

// headRules applies the whole-head rules: a Host for HTTP/1.1, the Transfer-Encoding
// checks, the body limit, Expect. It returns the body's framing.
func (p *Parser) headRules() (cl int64, chunked bool, e *Error) {
	if p.protoMinor == 1 && p.hostIdx < 0 {
		return 0, false, errNoHost
	}
	cl = -1
	if p.clIdx >= 0 {
		cl = p.cl
	}
	if p.teSeen {
		if err := p.checkTE(); err != nil {
			return 0, false, err
		}
		chunked = true
	}
	if cl > p.cfg.MaxBodyBytes {
		return 0, false, errBodyTooLarge
	}
	if p.expectOther {
		return 0, false, errExpectation
	}
	return cl, chunked, nil
}

// fillFlags fills the fields of req other than the views.
func (p *Parser) fillFlags(req *Request, cl int64, chunked bool, end int) {
	req.ProtoMinor = p.protoMinor
	req.ContentLength = cl
	req.Chunked = chunked
	if p.protoMinor == 1 {
		req.KeepAlive = !p.connClose
	} else {
		req.KeepAlive = p.connKeepAlive && !p.connClose
	}
	req.Expect100 = p.expect100 && p.protoMinor == 1 && (chunked || cl > 0)
	req.HeadLen = end
}

// checkTE applies the rules of a head with Transfer-Encoding. Out of line: finish runs
// for every head, and most have none.
//
//go:noinline
func (p *Parser) checkTE() *Error {
	switch {
	case p.protoMinor == 0:
		return errTE10
	case p.clIdx >= 0:
		return errCLAndTE
	case p.teBad || p.teElems == 0:
		return errBadTE
	case p.teChunked > 1 || p.teChunked == 1 && !p.teLastChunked:
		return errChunkedNotLast
	case p.teUnknown:
		return errUnknownTE
	}
	return nil
}

// validTargetPrefix returns the length of the longest prefix of b made of
// request-target bytes (visible ASCII).
func validTargetPrefix(b []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for i+8 <= len(b) {
		// Stop at a word holding a byte below 0x21 or above 0x7E.
		x := binary.LittleEndian.Uint64(b[i:])
		if ((x-0x21*lo)&^x|(x+lo)|x)&hi != 0 {
			break
		}
		i += 8
	}
	for i < len(b) && isTargetChar[b[i]] {
		i++
	}
	return i
}

// validValue reports whether every byte of v is allowed in a field value.
func validValue(v []byte) bool {
	i := 0
	for i+8 <= len(v) && !hasCtl(binary.LittleEndian.Uint64(v[i:])) {
		i += 8
	}
	for ; i < len(v); i++ {
		if !isValueChar[v[i]] {
			return false
		}
	}
	return true
}
