package httpcodec

import (
	"encoding/binary"
	"math/bits"
)

// parseWhole is ParseHead's fast path, for a fresh Parser and a head that is complete in
// buf and has the common shape: no empty lines before it, a method other than CONNECT, an
// origin-form target ("/..."), HTTP/1.1 or HTTP/1.0, and field lines that break no rule.
// It makes one pass over the head with its progress in locals, and applies the same
// per-field and whole-head rules as the general path (field, splitPath, headRules), so what
// it accepts, the general path accepts with the same result. It reports ok=false, with p
// reset and nothing of req that the general path relies on, for anything else: a head
// not yet complete, another shape, a limit reached, any error. The general path then
// parses buf from its first byte and gives the answer, so every rejection (and its
// status) stays the general path's.
func (p *Parser) parseWhole(buf []byte, req *Request) (n int, ok bool) {
	// Request line: the general path looks for its LF only below MaxRequestLineBytes. The
	// loops index line (and head below), not buf, so that they need no bounds checks.
	line := buf[:min(len(buf), p.cfg.MaxRequestLineBytes)]
	i := 0
	if len(line) >= 4 && binary.LittleEndian.Uint32(line) == methodGET {
		i = 3
	} else {
		for i < len(line) && isTchar[line[i]] {
			i++
		}
		if i == 0 || i >= len(line) || line[i] != ' ' || (i == 7 && string(line[:7]) == "CONNECT") {
			return 0, false
		}
	}
	methodEnd := i
	tb := i + 1
	if tb >= len(line) || line[tb] != '/' {
		return 0, false
	}
	// The path runs to the first '?' or '%' or to the target's end; only then is the rest
	// of the target looked at, so that a plain path is scanned once.
	pe := tb + pathPrefix(line[tb:])
	te := pe
	if pe < len(line) && (line[pe] == '?' || line[pe] == '%') {
		te = pe + validTargetPrefix(line[pe:])
	}
	// " HTTP/1.x\r\n": the LF, at te+10, must be below the limit.
	if te+11 > len(line) || line[te] != ' ' || line[te+9] != '\r' || line[te+10] != '\n' {
		return 0, false
	}
	switch string(line[te+1 : te+9]) {
	case "HTTP/1.1":
		p.protoMinor = 1
	case "HTTP/1.0":
		p.protoMinor = 0
	default:
		return 0, false
	}
	qb := -1 // the query's start, if any
	if pe < te {
		if line[pe] == '%' {
			// A percent-encoding in the path: splitPath checks it and finds the '?'.
			p.queryBeg = -1
			if p.splitPath(buf, tb, te) != nil {
				p.abandon()
				return 0, false
			}
			pe, qb = p.pathEnd, p.queryBeg
		} else { // line[pe] is the first '?'
			qb = pe + 1
		}
	}

	// Field lines: no byte at or past MaxHeaderBytes is looked at, as in fieldLoop.
	head := buf[:min(len(buf), p.cfg.MaxHeaderBytes)]
	pos := te + 11
	hs := req.Headers[:0]
	for {
		if pos >= len(head) || p.nfields >= p.cfg.MaxHeaderCount && head[pos] != '\r' {
			p.abandon()
			return 0, false
		}
		if head[pos] == '\r' { // the empty line that ends the head
			if pos+1 >= len(head) || head[pos+1] != '\n' {
				p.abandon()
				return 0, false
			}
			n = pos + 2
			break
		}
		ls := pos
		if pos+4 < len(head) && binary.LittleEndian.Uint32(head[pos:]) == fieldHost && head[pos+4] == ':' {
			pos += 4 // the Host field, as most clients spell it: a token
		} else {
			for pos < len(head) && isTchar[head[pos]] {
				pos++
			}
			if pos == ls || pos >= len(head) || head[pos] != ':' {
				p.abandon()
				return 0, false
			}
		}
		colon := pos
		pos++
		// The value: 8 bytes at a time up to the first control byte, which is the CR
		// unless the value holds a tab or a byte the byte loop refuses.
		for pos+8 <= len(head) {
			if m := ctlBits(binary.LittleEndian.Uint64(head[pos:])); m != 0 {
				pos += bits.TrailingZeros64(m) >> 3
				break
			}
			pos += 8
		}
		for pos < len(head) && isValueChar[head[pos]] {
			pos++
		}
		if pos+1 >= len(head) || head[pos] != '\r' || head[pos+1] != '\n' {
			p.abandon()
			return 0, false
		}
		var e *Error
		if hs, e = p.field(buf[ls:pos], hs, colon-ls); e != nil {
			p.abandon()
			return 0, false
		}
		pos += 2
	}
	// finish's work, with the views cut from the locals.
	cl, chunked, e := p.headRules()
	if e != nil {
		p.abandon()
		return 0, false
	}
	var rawQuery, host, upgrade []byte
	if qb >= 0 {
		rawQuery = line[qb:te:te]
	}
	if p.hostIdx >= 0 {
		host = hs[p.hostIdx].Value
	}
	if p.connUpgrade && p.upgradeIdx >= 0 {
		upgrade = hs[p.upgradeIdx].Value
	}
	req.Headers = hs
	req.Method, req.Target, req.Path = line[:methodEnd:methodEnd], line[tb:te:te], line[tb:pe:pe]
	req.RawQuery, req.Host, req.Upgrade = rawQuery, host, upgrade
	p.fillFlags(req, cl, chunked, n)
	p.Reset()
	return n, true
}

// fieldHost is "Host" as a little-endian word.
const fieldHost = 'H' | 'o'<<8 | 's'<<16 | 't'<<24

// methodGET is "GET " as a little-endian word: the method parseWhole checks whole.
const methodGET = 'G' | 'E'<<8 | 'T'<<16 | ' '<<24

// pathPrefix returns the length of the longest prefix of b made of request-target bytes
// (visible ASCII) other than '?' and '%'. It looks at 8 bytes at a time: the lowest byte
// flagged by each test below is exact (a borrow or carry only runs upwards from a byte
// that is itself flagged), so the first flagged byte ends the prefix.
func pathPrefix(b []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		q, pc := x^('?'*lo), x^('%'*lo)
		if m := ((x-0x21*lo)&^x | (x + lo) | x | (q-lo)&^q | (pc-lo)&^pc) & hi; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	for i < len(b) && isPathChar[b[i]] {
		i++
	}
	return i
}

// abandon is Reset for parseWhole's way out to the general path. Out of line: the fast
// path's code stays dense (each inlined Reset is 45 bytes beside the hot loop).
//
//go:noinline
func (p *Parser) abandon() { p.Reset() }
