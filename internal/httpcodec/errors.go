package httpcodec

import (
	"errors"
	"strconv"
)

// ErrNeedMore is returned by ParseHead when the head is not complete yet.
// Read more bytes and call again with the same buffer prefix.
var ErrNeedMore = errors.New("httpcodec: need more data")

// ErrInvalidHeader is returned by AppendResponseHead for a header whose name
// is not a token or whose value holds CR, LF, NUL or another control byte,
// and for a user header named Content-Length or Transfer-Encoding (framing
// is set through ResponseHead fields only).
var ErrInvalidHeader = errors.New("httpcodec: invalid response header")

// ErrInvalidStatus is returned by AppendResponseHead for a status code
// outside 100-999.
var ErrInvalidStatus = errors.New("httpcodec: invalid status code")

// Error is a request the codec rejects. Status is the HTTP status code to
// answer with (400, 413, 414, 417, 431, 501 or 505); Reason says what was
// wrong, for logs. Every Error means the connection must be closed after the
// error response: the codec cannot tell where the next request would start.
//
// The parser returns shared *Error values; do not modify them.
type Error struct {
	Status int
	Reason string
}

// Error returns "httpcodec: <status> <reason>".
func (e *Error) Error() string {
	return "httpcodec: " + strconv.Itoa(e.Status) + " " + e.Reason
}

func newErr(status int, reason string) *Error { return &Error{Status: status, Reason: reason} }

// Errors returned by the parser and the body decoder. They are preallocated
// so that rejecting costs no allocation.
var (
	errBadRequestLine    = newErr(400, "malformed request line")
	errBadMethod         = newErr(400, "invalid method")
	errBadTarget         = newErr(400, "invalid request target")
	errAsteriskNotOpts   = newErr(400, "asterisk-form target used with a method other than OPTIONS")
	errBadVersion        = newErr(400, "malformed HTTP version")
	errVersion           = newErr(505, "HTTP version not supported")
	errBareLF            = newErr(400, "line terminated by a bare LF")
	errBareCR            = newErr(400, "CR not followed by LF")
	errManyEmptyLines    = newErr(400, "too many empty lines before the request line")
	errLeadingWS         = newErr(400, "whitespace at the start of a field line (obs-fold)")
	errBadHeaderName     = newErr(400, "invalid header field name")
	errBadHeaderValue    = newErr(400, "invalid header field value")
	errNoHost            = newErr(400, "missing Host header")
	errManyHosts         = newErr(400, "repeated Host header")
	errBadHost           = newErr(400, "invalid Host header")
	errBadContentLength  = newErr(400, "invalid Content-Length")
	errManyContentLength = newErr(400, "conflicting Content-Length headers")
	errCLAndTE           = newErr(400, "both Content-Length and Transfer-Encoding")
	errTE10              = newErr(400, "Transfer-Encoding in an HTTP/1.0 request")
	errBadTE             = newErr(400, "malformed Transfer-Encoding")
	errChunkedNotLast    = newErr(400, "chunked is not the final transfer coding, or is repeated")
	errUnknownTE         = newErr(501, "unsupported transfer coding")
	errExpectation       = newErr(417, "unsupported expectation")
	errRequestLineLong   = newErr(414, "request line too long")
	errHeadTooLarge      = newErr(431, "request header section too large")
	errTooManyHeaders    = newErr(431, "too many header fields")
	errBodyTooLarge      = newErr(413, "request body too large")

	errBadChunkSize    = newErr(400, "invalid chunk size")
	errChunkSizeLong   = newErr(400, "chunk size has too many digits")
	errBadChunkExt     = newErr(400, "invalid chunk extension")
	errChunkLineLong   = newErr(400, "chunk line too long")
	errChunkCRLF       = newErr(400, "missing CRLF after chunk data")
	errChunkOverhead   = newErr(400, "chunked encoding contains too much non-data")
	errBadTrailer      = newErr(400, "invalid trailer field")
	errTrailerTooLarge = newErr(431, "trailer section too large")
	errTooManyTrailers = newErr(431, "too many trailer fields")
)
