package httpcodec

import "bytes"

// Body framing modes.
const (
	modeNone    = iota // no body
	modeLength         // Content-Length
	modeChunked        // Transfer-Encoding: chunked
)

// Chunked decoder states. Chunk line grammar (RFC 9112 §7.1):
//
//	chunk-line = 1*HEXDIG *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] ) CRLF
//	ext-val    = token / quoted-string
//
// except that no whitespace is accepted right after the size.
const (
	stSize           = iota // first hex digit
	stSizeMore              // more hex digits, ';' or CR
	stBWSSemi               // whitespace seen: only more whitespace or ';'
	stExtNameStart          // after ';': BWS, then a token
	stExtName               // in the name
	stExtAfterName          // BWS after the name: '=' or ';' next
	stExtValStart           // after '=': BWS, then token or quoted-string
	stExtValToken           // in a token value
	stExtQuoted             // in a quoted-string
	stExtQuotedEsc          // after a backslash in a quoted-string
	stExtAfterQuoted        // after the closing quote
	stLineLF                // CR seen, LF next
	stData                  // chunk data
	stDataCR                // CR after chunk data
	stDataLF                // LF after chunk data
	stTrailer               // trailer section, one line at a time
	stDone
)

// Chunk overhead accounting, as in net/http: every chunk may carry 16 bytes
// of framing plus twice its data size for free; beyond that, framing bytes
// (long extensions, many tiny chunks) accumulate, and more than
// maxChunkExcess of them is rejected with 400.
const (
	chunkFreeOverhead = 16
	maxChunkExcess    = 16 << 10
)

// trailerOff locates a trailer field in BodyDecoder.tbuf: name [ns, ne),
// value [vs, ve). Offsets, because tbuf may move as it grows.
type trailerOff struct{ ns, ne, vs, ve int32 }

// BodyDecoder decodes a request body framed by Content-Length or by the
// chunked transfer coding, incrementally: feed it the bytes that follow the
// head as they arrive. The zero value decodes an empty body; call Init for
// each request. A BodyDecoder belongs to one connection and must be used
// from one goroutine at a time. It keeps the capacity of its trailer buffer
// across Init calls.
type BodyDecoder struct {
	mode      int
	state     int
	remaining int64 // bytes left in the body (Content-Length) or chunk
	total     int64 // decoded bytes so far
	maxBody   int64
	size      int64 // chunk size being parsed
	digits    int   // hex digits of the size
	lineLen   int   // bytes of the current chunk line so far
	excess    int64 // framing overhead beyond the free allowance
	err       *Error

	maxLine       int
	maxTrailer    int
	maxTrailerCnt int

	tbuf      []byte       // raw trailer lines (owned)
	lineStart int          // start in tbuf of the trailer line in progress
	toffs     []trailerOff // trailer fields in tbuf
	trailers  []Header
}

// Init prepares d for the body of req, framed by req.Chunked or
// req.ContentLength (a request with neither has no body), with the limits of
// cfg. A Content-Length over cfg.MaxBodyBytes makes Decode fail with 413.
func (d *BodyDecoder) Init(req *Request, cfg Config) {
	cfg = cfg.normalized()
	*d = BodyDecoder{
		maxBody:       cfg.MaxBodyBytes,
		maxLine:       cfg.MaxChunkLineBytes,
		maxTrailer:    cfg.MaxHeaderBytes,
		maxTrailerCnt: cfg.MaxHeaderCount,
		tbuf:          d.tbuf[:0],
		toffs:         d.toffs[:0],
		trailers:      d.trailers[:0],
	}
	switch {
	case req.Chunked:
		d.mode = modeChunked
		d.state = stSize
	case req.ContentLength > 0:
		d.mode = modeLength
		d.remaining = req.ContentLength
		if req.ContentLength > d.maxBody {
			d.err = errBodyTooLarge
		}
	default:
		d.mode = modeNone
	}
}

// Done reports whether the whole body (and, for chunked, the trailers) has
// been decoded.
func (d *BodyDecoder) Done() bool {
	switch d.mode {
	case modeNone:
		return d.err == nil
	case modeLength:
		return d.err == nil && d.remaining == 0
	}
	return d.state == stDone
}

// Decode consumes body bytes from src and appends the decoded body to dst,
// returning the extended slice as out. consumed is the number of bytes of
// src used: it never exceeds len(src) nor goes past the end of this body, so
// src[consumed:] holds the next pipelined request once done is true. With
// an empty src it only reports the state. After an error, Decode keeps
// returning the same error; the error's Status (400, 413 or 431) is the
// answer, and the connection must be closed.
func (d *BodyDecoder) Decode(src, dst []byte) (consumed int, out []byte, done bool, err error) {
	if d.err != nil {
		return 0, dst, false, d.err
	}
	switch d.mode {
	case modeNone:
		return 0, dst, true, nil
	case modeLength:
		n := len(src)
		if int64(n) > d.remaining {
			n = int(d.remaining)
		}
		d.remaining -= int64(n)
		d.total += int64(n)
		return n, append(dst, src[:n]...), d.remaining == 0, nil
	}
	n, dst, e := d.decodeChunked(src, dst)
	if e != nil {
		d.err = e
		return n, dst, false, e
	}
	return n, dst, d.state == stDone, nil
}

// Trailers returns the trailer fields of a chunked body, in order. They are
// copies owned by d, valid until the next Init. Trailer fields are not
// merged into the request headers; what to do with them is up to the caller.
func (d *BodyDecoder) Trailers() []Header {
	if d.state != stDone || len(d.toffs) == 0 {
		return nil
	}
	if len(d.trailers) != len(d.toffs) {
		d.trailers = d.trailers[:0]
		for _, f := range d.toffs {
			d.trailers = append(d.trailers, Header{
				Name:  d.tbuf[f.ns:f.ne:f.ne],
				Value: d.tbuf[f.vs:f.ve:f.ve],
			})
		}
	}
	return d.trailers
}

// isQDText reports bytes allowed unescaped in a quoted-string.
func isQDText(c byte) bool {
	return c == '\t' || c == ' ' || c == 0x21 || (0x23 <= c && c <= 0x5b) ||
		(0x5d <= c && c <= 0x7e) || c >= 0x80
}

func (d *BodyDecoder) decodeChunked(src, dst []byte) (int, []byte, *Error) {
	i := 0
	for i < len(src) {
		switch d.state {
		case stData:
			n := len(src) - i
			if int64(n) > d.remaining {
				n = int(d.remaining)
			}
			dst = append(dst, src[i:i+n]...)
			i += n
			d.remaining -= int64(n)
			d.total += int64(n)
			if d.remaining == 0 {
				d.state = stDataCR
			}
			continue
		case stDataCR:
			if src[i] != '\r' {
				return i, dst, errChunkCRLF
			}
			d.state = stDataLF
			i++
			continue
		case stDataLF:
			if src[i] != '\n' {
				return i, dst, errChunkCRLF
			}
			d.state = stSize
			i++
			continue
		case stTrailer:
			n, e := d.trailerBytes(src[i:])
			i += n
			if e != nil {
				return i, dst, e
			}
			continue
		case stDone:
			return i, dst, nil
		}

		// Chunk line, one byte at a time.
		c := src[i]
		i++
		d.lineLen++
		if d.lineLen > d.maxLine {
			return i, dst, errChunkLineLong
		}
		switch d.state {
		case stSize, stSizeMore:
			if v := unhex[c]; v != 0xff {
				d.digits++
				if d.digits > 16 {
					return i, dst, errChunkSizeLong
				}
				// size<<4|v must not exceed what the body limit leaves;
				// checking size first also rules out overflow.
				limit := d.maxBody - d.total
				if d.size > limit>>4 {
					return i, dst, errBodyTooLarge
				}
				d.size = d.size<<4 | int64(v)
				if d.size > limit {
					return i, dst, errBodyTooLarge
				}
				d.state = stSizeMore
				continue
			}
			if d.state == stSize {
				return i, dst, errBadChunkSize
			}
			// Whitespace between the size and ';' (BWS in RFC 9112) is
			// refused, as net/http does: nothing legitimate sends it.
			switch c {
			case ';':
				d.state = stExtNameStart
			case '\r':
				d.state = stLineLF
			default:
				return i, dst, errBadChunkSize
			}
		case stBWSSemi:
			switch c {
			case ' ', '\t':
			case ';':
				d.state = stExtNameStart
			default:
				return i, dst, errBadChunkExt
			}
		case stExtNameStart:
			switch {
			case c == ' ' || c == '\t':
			case isTchar[c]:
				d.state = stExtName
			default:
				return i, dst, errBadChunkExt
			}
		case stExtName:
			switch {
			case isTchar[c]:
			case c == '=':
				d.state = stExtValStart
			case c == ';':
				d.state = stExtNameStart
			case c == ' ' || c == '\t':
				d.state = stExtAfterName
			case c == '\r':
				d.state = stLineLF
			default:
				return i, dst, errBadChunkExt
			}
		case stExtAfterName:
			switch c {
			case ' ', '\t':
			case '=':
				d.state = stExtValStart
			case ';':
				d.state = stExtNameStart
			default:
				return i, dst, errBadChunkExt
			}
		case stExtValStart:
			switch {
			case c == ' ' || c == '\t':
			case c == '"':
				d.state = stExtQuoted
			case isTchar[c]:
				d.state = stExtValToken
			default:
				return i, dst, errBadChunkExt
			}
		case stExtValToken:
			switch {
			case isTchar[c]:
			case c == ';':
				d.state = stExtNameStart
			case c == ' ' || c == '\t':
				d.state = stBWSSemi
			case c == '\r':
				d.state = stLineLF
			default:
				return i, dst, errBadChunkExt
			}
		case stExtQuoted:
			switch {
			case c == '"':
				d.state = stExtAfterQuoted
			case c == '\\':
				d.state = stExtQuotedEsc
			case isQDText(c):
			default:
				return i, dst, errBadChunkExt
			}
		case stExtQuotedEsc:
			if c != '\t' && c != ' ' && (c < 0x21 || c == 0x7f) {
				return i, dst, errBadChunkExt
			}
			d.state = stExtQuoted
		case stExtAfterQuoted:
			switch c {
			case ';':
				d.state = stExtNameStart
			case ' ', '\t':
				d.state = stBWSSemi
			case '\r':
				d.state = stLineLF
			default:
				return i, dst, errBadChunkExt
			}
		case stLineLF:
			if c != '\n' {
				return i, dst, errBadChunkSize
			}
			// Overhead: the line without its CRLF plus the CRLF after the
			// data, minus the free allowance.
			d.excess += int64(d.lineLen) - chunkFreeOverhead - 2*min(d.size, 1<<40)
			if d.excess < 0 {
				d.excess = 0
			}
			if d.excess > maxChunkExcess {
				return i, dst, errChunkOverhead
			}
			d.remaining = d.size
			d.size, d.digits, d.lineLen = 0, 0, 0
			if d.remaining == 0 {
				d.state = stTrailer
				d.lineStart = 0
			} else {
				d.state = stData
			}
		}
	}
	return i, dst, nil
}

// trailerBytes consumes trailer-section bytes from src up to the end of the
// section. Lines are collected in d.tbuf and checked when complete.
func (d *BodyDecoder) trailerBytes(src []byte) (int, *Error) {
	i := 0
	for i < len(src) {
		// Copy up to and including the next LF.
		j := len(src)
		complete := false
		if k := bytes.IndexByte(src[i:], '\n'); k >= 0 {
			j = i + k + 1
			complete = true
		}
		if len(d.tbuf)+(j-i) > d.maxTrailer {
			return j, errTrailerTooLarge
		}
		d.tbuf = append(d.tbuf, src[i:j]...)
		i = j
		if !complete {
			return i, nil
		}
		line := d.tbuf[d.lineStart:]
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return i, errBareLF
		}
		line = line[:len(line)-2]
		if len(line) == 0 {
			d.state = stDone
			return i, nil
		}
		if e := d.trailerField(d.lineStart, d.lineStart+len(line)); e != nil {
			return i, e
		}
		d.lineStart = len(d.tbuf)
	}
	return i, nil
}

// trailerField checks the trailer line d.tbuf[ls:le] and records it.
func (d *BodyDecoder) trailerField(ls, le int) *Error {
	if len(d.toffs) >= d.maxTrailerCnt {
		return errTooManyTrailers
	}
	b := d.tbuf
	if c := b[ls]; c == ' ' || c == '\t' {
		return errBadTrailer
	}
	i := ls
	for i < le && isTchar[b[i]] {
		i++
	}
	if i == le || b[i] != ':' || i == ls {
		return errBadTrailer
	}
	ne := i
	i++
	for i < le && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	vs, ve := i, le
	for ve > vs && (b[ve-1] == ' ' || b[ve-1] == '\t') {
		ve--
	}
	if !validValue(b[vs:ve]) {
		return errBadTrailer
	}
	d.toffs = append(d.toffs, trailerOff{int32(ls), int32(ne), int32(vs), int32(ve)})
	return nil
}
