package httpcodec

import "encoding/binary"

// parseWhole is ParseHead's fast path, for a fresh Parser and a head that is complete in
// buf and has the common shape: no empty lines before it, a method other than CONNECT, an
// origin-form target ("/..."), HTTP/1.1 or HTTP/1.0, and field lines that break no rule.
// It makes one pass over the head with its progress in locals, and applies the same
// per-field and whole-head rules as the general path (field, splitPath, finish), so what
// it accepts, the general path accepts with the same result. It reports ok=false, with p
// reset and nothing of req that the general path relies on, for anything else: a head
// not yet complete, another shape, a limit reached, any error. The general path then
// parses buf from its first byte and gives the answer, so every rejection (and its
// status) stays the general path's.
func (p *Parser) parseWhole(buf []byte, req *Request) (n int, ok bool) {
	// Request line: the general path looks for its LF only below MaxRequestLineBytes.
	lim := min(len(buf), p.cfg.MaxRequestLineBytes)
	i := 0
	for i < lim && isTchar[buf[i]] {
		i++
	}
	if i == 0 || i >= lim || buf[i] != ' ' || (i == 7 && string(buf[:7]) == "CONNECT") {
		return 0, false
	}
	methodEnd := i
	tb := i + 1
	if tb >= lim || buf[tb] != '/' {
		return 0, false
	}
	te := tb + validTargetPrefix(buf[tb:lim])
	// " HTTP/1.x\r\n": the LF, at te+10, must be below lim.
	if te+11 > lim || buf[te] != ' ' || buf[te+9] != '\r' || buf[te+10] != '\n' {
		return 0, false
	}
	switch string(buf[te+1 : te+9]) {
	case "HTTP/1.1":
		p.protoMinor = 1
	case "HTTP/1.0":
		p.protoMinor = 0
	default:
		return 0, false
	}
	p.queryBeg = -1
	if p.splitPath(buf, tb, te) != nil {
		p.abandon()
		return 0, false
	}

	// Field lines: no byte at or past MaxHeaderBytes is looked at, as in fieldLoop.
	end := min(len(buf), p.cfg.MaxHeaderBytes)
	pos := te + 11
	hs := req.Headers[:0]
	for {
		if pos >= end || p.nfields >= p.cfg.MaxHeaderCount && buf[pos] != '\r' {
			p.abandon()
			return 0, false
		}
		if buf[pos] == '\r' { // the empty line that ends the head
			if pos+1 >= end || buf[pos+1] != '\n' {
				p.abandon()
				return 0, false
			}
			n = pos + 2
			break
		}
		ls := pos
		for pos < end && isTchar[buf[pos]] {
			pos++
		}
		if pos == ls || pos >= end || buf[pos] != ':' {
			p.abandon()
			return 0, false
		}
		colon := pos
		pos++
		for pos+8 <= end && !hasCtl(binary.LittleEndian.Uint64(buf[pos:])) {
			pos += 8
		}
		for pos < end && isValueChar[buf[pos]] {
			pos++
		}
		if pos+1 >= end || buf[pos] != '\r' || buf[pos+1] != '\n' {
			p.abandon()
			return 0, false
		}
		var e *Error
		if hs, e = p.field(buf, hs, ls, colon, pos); e != nil {
			p.abandon()
			return 0, false
		}
		pos += 2
	}
	req.Headers = hs
	p.methodEnd, p.targetBeg, p.targetEnd, p.form = methodEnd, tb, te, formOrigin
	if p.finish(buf, n, req) != nil {
		p.abandon()
		return 0, false
	}
	p.Reset()
	return n, true
}

// abandon is Reset for parseWhole's way out to the general path. Out of line: the fast
// path's code stays dense (each inlined Reset is 45 bytes beside the hot loop).
//
//go:noinline
func (p *Parser) abandon() { p.Reset() }
