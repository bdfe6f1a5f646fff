package httpcodec

import (
	"strconv"
	"time"
)

// StatusText returns the reason phrase of an HTTP status code, as named by
// RFC 9110 (and RFC 6585, 4918, 8297, 8470, 2295, 2774, 5842, 7725, 3229
// for the extension codes), or "" for an unknown code. Where RFC 9110
// renamed a code it uses the new name: 413 "Content Too Large", 414 "URI
// Too Long", 416 "Range Not Satisfiable", 422 "Unprocessable Content".
func StatusText(code int) string {
	switch code {
	case 100:
		return "Continue"
	case 101:
		return "Switching Protocols"
	case 102:
		return "Processing"
	case 103:
		return "Early Hints"
	case 200:
		return "OK"
	case 201:
		return "Created"
	case 202:
		return "Accepted"
	case 203:
		return "Non-Authoritative Information"
	case 204:
		return "No Content"
	case 205:
		return "Reset Content"
	case 206:
		return "Partial Content"
	case 207:
		return "Multi-Status"
	case 208:
		return "Already Reported"
	case 226:
		return "IM Used"
	case 300:
		return "Multiple Choices"
	case 301:
		return "Moved Permanently"
	case 302:
		return "Found"
	case 303:
		return "See Other"
	case 304:
		return "Not Modified"
	case 305:
		return "Use Proxy"
	case 307:
		return "Temporary Redirect"
	case 308:
		return "Permanent Redirect"
	case 400:
		return "Bad Request"
	case 401:
		return "Unauthorized"
	case 402:
		return "Payment Required"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 406:
		return "Not Acceptable"
	case 407:
		return "Proxy Authentication Required"
	case 408:
		return "Request Timeout"
	case 409:
		return "Conflict"
	case 410:
		return "Gone"
	case 411:
		return "Length Required"
	case 412:
		return "Precondition Failed"
	case 413:
		return "Content Too Large"
	case 414:
		return "URI Too Long"
	case 415:
		return "Unsupported Media Type"
	case 416:
		return "Range Not Satisfiable"
	case 417:
		return "Expectation Failed"
	case 418:
		return "I'm a teapot"
	case 421:
		return "Misdirected Request"
	case 422:
		return "Unprocessable Content"
	case 423:
		return "Locked"
	case 424:
		return "Failed Dependency"
	case 425:
		return "Too Early"
	case 426:
		return "Upgrade Required"
	case 428:
		return "Precondition Required"
	case 429:
		return "Too Many Requests"
	case 431:
		return "Request Header Fields Too Large"
	case 451:
		return "Unavailable For Legal Reasons"
	case 500:
		return "Internal Server Error"
	case 501:
		return "Not Implemented"
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	case 505:
		return "HTTP Version Not Supported"
	case 506:
		return "Variant Also Negotiates"
	case 507:
		return "Insufficient Storage"
	case 508:
		return "Loop Detected"
	case 510:
		return "Not Extended"
	case 511:
		return "Network Authentication Required"
	}
	return ""
}

// Date holds the current time formatted as an IMF-fixdate
// ("Mon, 02 Jan 2006 15:04:05 GMT") for the Date header. Formatting once a
// second instead of once per response is the point: the owner calls Update
// from a one-second ticker and passes Bytes to every ResponseHead. The zero
// Date is empty (Bytes returns nil). A Date is not safe for concurrent use:
// update it on the goroutine that writes the responses.
type Date struct {
	buf [29]byte
	ok  bool
}

// imfFixdate is the layout of an HTTP date (RFC 9110 §5.6.7).
const imfFixdate = "Mon, 02 Jan 2006 15:04:05 GMT"

// Update formats t (converted to UTC). A year outside 0000-9999 cannot be
// written as an IMF-fixdate and leaves the Date empty.
func (d *Date) Update(t time.Time) {
	b := t.UTC().AppendFormat(d.buf[:0], imfFixdate)
	d.ok = len(b) == len(d.buf) && &b[0] == &d.buf[0]
}

// Bytes returns the formatted date, or nil before the first Update. The
// slice aliases d: its contents change at the next Update, so copy it (as
// AppendResponseHead does) rather than keep it.
func (d *Date) Bytes() []byte {
	if !d.ok {
		return nil
	}
	return d.buf[:]
}

// ResponseHead describes a response head for AppendResponseHead.
type ResponseHead struct {
	// Status is the status code, 100-999. The reason phrase is
	// StatusText(Status) (empty for unknown codes).
	Status int

	// Headers are the caller's fields, written in order. Names must be
	// tokens and values must pass ValidHeaderValue. Content-Length and
	// Transfer-Encoding are not allowed here: framing comes from the
	// fields below.
	Headers []Header

	// ContentLength is written as "Content-Length" when Chunked is false
	// and ContentLength >= 0; a negative value writes no Content-Length.
	// For a response to HEAD, pass the length the GET response would have
	// and write no body.
	ContentLength int64

	// Chunked writes "Transfer-Encoding: chunked"; the body is then sent
	// with AppendChunk and AppendFinalChunk.
	Chunked bool

	// Close writes "Connection: close": the server closes the connection
	// after this response.
	Close bool

	// KeepAlive10 writes "Connection: keep-alive", which an HTTP/1.0
	// client that asked for keep-alive needs to see. Ignored when Close is
	// set.
	KeepAlive10 bool

	// Date, if non-nil, is written as the Date header (see Date.Bytes).
	Date []byte
}

// AppendResponseHead appends the response head described by h to dst and
// returns the extended slice: the status line "HTTP/1.1 <code> <reason>",
// Date, the caller's headers, the framing header, Connection, and the empty
// line. Responses with a 1xx or 204 status never get Content-Length or
// Transfer-Encoding (RFC 9112 §6.1, RFC 9110 §8.6), whatever h says.
//
// It returns ErrInvalidStatus for a status outside 100-999 and
// ErrInvalidHeader for a header name that is not a token, a value (or Date)
// holding CR, LF, NUL or another control byte, or a caller header named
// Content-Length or Transfer-Encoding; on error dst is returned unchanged.
// It allocates nothing when dst has enough capacity.
func AppendResponseHead(dst []byte, h *ResponseHead) ([]byte, error) {
	if h.Status < 100 || h.Status > 999 {
		return dst, ErrInvalidStatus
	}
	if h.Date != nil && !ValidHeaderValue(h.Date) {
		return dst, ErrInvalidHeader
	}
	for i := range h.Headers {
		n := h.Headers[i].Name
		if !ValidHeaderName(n) || !ValidHeaderValue(h.Headers[i].Value) {
			return dst, ErrInvalidHeader
		}
		if (len(n) == 14 && equalFoldLower(n, "content-length")) ||
			(len(n) == 17 && equalFoldLower(n, "transfer-encoding")) {
			return dst, ErrInvalidHeader
		}
	}

	s := h.Status
	dst = append(dst, "HTTP/1.1 "...)
	dst = append(dst, byte('0'+s/100), byte('0'+s/10%10), byte('0'+s%10), ' ')
	dst = append(dst, StatusText(s)...)
	dst = append(dst, "\r\n"...)
	if h.Date != nil {
		dst = append(dst, "Date: "...)
		dst = append(dst, h.Date...)
		dst = append(dst, "\r\n"...)
	}
	for i := range h.Headers {
		dst = append(dst, h.Headers[i].Name...)
		dst = append(dst, ": "...)
		dst = append(dst, h.Headers[i].Value...)
		dst = append(dst, "\r\n"...)
	}
	return AppendResponseHeadEnd(dst, h.Status, h.ContentLength, h.Chunked, h.Close, h.KeepAlive10), nil
}

// AppendResponseHeadEnd appends the part of a head that AppendResponseHead
// writes after the caller's headers: the framing header, Connection and the
// empty line, for a head h with Status status, ContentLength contentLength,
// Chunked chunked, Close closeConn and KeepAlive10 keepAlive10. It validates
// nothing, and takes the fields as arguments, not a *ResponseHead: a caller on
// the per-response path then builds no head in memory. It lets a caller that
// writes many responses with the same status line, Date and headers make that
// start once: AppendResponseHead of a head with those and ContentLength -1,
// Chunked, Close and KeepAlive10 unset ends with the start and then "\r\n";
// the start followed by AppendResponseHeadEnd of h's fields is then byte for
// byte what AppendResponseHead(h) writes.
func AppendResponseHeadEnd(dst []byte, status int, contentLength int64, chunked, closeConn, keepAlive10 bool) []byte {
	if status >= 200 && status != 204 {
		if chunked {
			dst = append(dst, "Transfer-Encoding: chunked\r\n"...)
		} else if contentLength >= 0 {
			dst = append(dst, "Content-Length: "...)
			dst = appendLength(dst, uint64(contentLength))
			dst = append(dst, "\r\n"...)
		}
	}
	if closeConn {
		dst = append(dst, "Connection: close\r\n"...)
	} else if keepAlive10 {
		dst = append(dst, "Connection: keep-alive\r\n"...)
	}
	return append(dst, "\r\n"...)
}

// appendLength appends n in decimal. Below 10,000, as most bodies are, the digits are
// appended one by one: strconv's call, its table of pairs and the append of the digits'
// slice (a memmove call) cost several times more.
func appendLength(dst []byte, n uint64) []byte {
	switch {
	case n < 10:
		return append(dst, byte('0'+n))
	case n < 100:
		return append(dst, byte('0'+n/10), byte('0'+n%10))
	case n < 1000:
		return append(dst, byte('0'+n/100), byte('0'+n/10%10), byte('0'+n%10))
	case n < 10000:
		return append(dst, byte('0'+n/1000), byte('0'+n/100%10), byte('0'+n/10%10), byte('0'+n%10))
	}
	return strconv.AppendUint(dst, n, 10)
}

// AppendChunk appends p as one chunk of a chunked body: the size in hex,
// CRLF, p, CRLF. An empty p appends nothing (an empty chunk would end the
// body; use AppendFinalChunk for that).
func AppendChunk(dst, p []byte) []byte {
	if len(p) == 0 {
		return dst
	}
	dst = strconv.AppendUint(dst, uint64(len(p)), 16)
	dst = append(dst, "\r\n"...)
	dst = append(dst, p...)
	return append(dst, "\r\n"...)
}

// AppendFinalChunk appends the last chunk and the end of an empty trailer
// section, "0\r\n\r\n", which ends a chunked body.
func AppendFinalChunk(dst []byte) []byte {
	return append(dst, "0\r\n\r\n"...)
}

// AppendContinue appends the interim response "HTTP/1.1 100 Continue" that
// tells a client sending "Expect: 100-continue" to go on with the body.
func AppendContinue(dst []byte) []byte {
	return append(dst, "HTTP/1.1 100 Continue\r\n\r\n"...)
}
