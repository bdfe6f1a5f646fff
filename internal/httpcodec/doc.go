// Package httpcodec is a strict, allocation-free HTTP/1.1 request parser and
// response writer working on byte slices, with the server side of
// WebSocket (RFC 6455) handshakes and framing.
//
// It is the front door of baton's server: the event loop hands it the raw
// bytes read from a connection and gets back parsed requests, and it appends
// responses to the connection's output buffer. It uses only the standard
// library, starts no goroutines and does no I/O.
//
// # Requests
//
// A Parser reads request heads incrementally. Pass ParseHead all the
// unconsumed bytes of the connection; it returns ErrNeedMore until the head
// is complete (remembering how far it got, so a large head arriving in many
// reads is scanned once), then fills a Request and returns the head length.
// The Request's []byte fields are views into the buffer; Request.CopyTo
// copies them into an arena when the request must outlive the buffer.
// Parsing a typical request allocates nothing once the Request's Headers
// slice has grown to fit.
//
//	n, err := p.ParseHead(buf, &req)
//	switch {
//	case err == httpcodec.ErrNeedMore: // read more, call again
//	case err != nil: // answer err.(*httpcodec.Error).Status, then close
//	default: // req is ready; the body starts at buf[n:]
//	}
//
// A BodyDecoder then decodes the body that follows, framed by
// Content-Length or chunked, incrementally and without reading past its
// end, so pipelined requests stay in the buffer with exact byte counts.
//
// # Responses
//
// AppendResponseHead appends a status line and headers, refusing header
// names and values that could inject lines. AppendResponseHeadEnd writes
// only what follows the caller's headers (framing, Connection, the empty
// line), for callers that keep a validated start of the heads they write
// often. AppendChunk and
// AppendFinalChunk frame a chunked body, AppendContinue writes the 100
// Continue interim response, and Date caches the Date header value so that
// it is formatted once a second rather than per response. None of them
// allocate when the destination has capacity.
//
// # WebSocket
//
// The package also holds the server side of RFC 6455 framing, on the same
// terms: []byte in and out, no I/O, no goroutines, no allocation on the
// hot path. CheckWSUpgrade validates an upgrade request parsed by
// ParseHead and returns its key, WSSelectProtocol picks a subprotocol,
// and AppendWSUpgradeResponse writes the 101 head with the
// Sec-WebSocket-Accept value. After it, the connection's bytes are
// frames: ParseWSFrame parses one client frame and unmasks it in place;
// WSReader turns frames into messages (reassembling fragments, letting
// control frames through between them, checking limits, UTF-8 and close
// payloads). Both are incremental over a growing buffer like ParseHead
// and report failures as a *WSError carrying the close code (1002, 1007,
// 1009). AppendWSFrame, AppendWSFrameHeader and AppendWSClose write
// unmasked server frames; an encoded frame can be appended to any number
// of connections (broadcast). Compression (permessage-deflate) and other
// extensions are not implemented: reserved bits are always an error.
//
// # Limits
//
// Config holds the limits; its zero value means the defaults
// DefaultMaxRequestLineBytes (8 KiB, 414), DefaultMaxHeaderBytes (64 KiB for
// the whole head, 431), DefaultMaxHeaderCount (100 fields, 431),
// DefaultMaxBodyBytes (8 MiB, 413), DefaultMaxChunkLineBytes (4 KiB,
// 400) and, for WebSocket, DefaultMaxWSMessageBytes (1 MiB per message and
// per frame, close code 1009). Config.Validate names a field out of range.
// Up to MaxLeadingEmptyLines (8) CRLFs before a request line are skipped
// (RFC 9112 §2.2); they do not count against the head limits. Head limits are enforced as soon as the received bytes exceed them,
// before the head is complete; a declared Content-Length over the body
// limit is refused before the body is read.
//
// # Rejection policy
//
// The parser follows RFC 9110 and RFC 9112 strictly and treats anything
// ambiguous as an attack (request smuggling, header injection). Every error
// is an *Error carrying the status to answer; after it the connection must
// be closed. The codes:
//
//   - 400: more than MaxLeadingEmptyLines (8) empty lines before the
//     request line (up to 8 CRLFs are skipped, RFC 9112 §2.2), a malformed
//     request line (method not a token; target with a
//     byte outside visible ASCII, a bad percent-encoding in its path,
//     userinfo, or an invalid host or port; "*" with a method other than
//     OPTIONS; CONNECT without host:port), a version that is not
//     "HTTP/x.y", a line ending in a bare LF, a CR not followed by LF, a
//     field name that is not a token or is followed by whitespace before
//     the colon, a field line starting with whitespace (obs-fold), a
//     control byte in a field value, a missing Host on HTTP/1.1, a
//     repeated or malformed Host, a Content-Length that is not 1*DIGIT or
//     several that differ, both Content-Length and Transfer-Encoding,
//     Transfer-Encoding on HTTP/1.0, a malformed Transfer-Encoding
//     (including empty list elements), chunked not the final coding or
//     applied twice; in chunked bodies, a bad chunk size (more than 16 hex
//     digits, whitespace after it), a malformed extension, a missing CRLF,
//     a chunk line over MaxChunkLineBytes, a malformed trailer field, or
//     too much framing overhead (the net/http rule: 16 bytes per chunk
//     plus twice its data are free, beyond that at most 16 KiB).
//   - 413: a body over MaxBodyBytes.
//   - 414: a request line over MaxRequestLineBytes.
//   - 417: an Expect value other than 100-continue.
//   - 431: a head over MaxHeaderBytes or more than MaxHeaderCount fields
//     (also for trailers).
//   - 501: a transfer coding other than chunked.
//   - 505: an HTTP version other than 1.0 and 1.1.
//
// Where a head breaks a limit and a syntax rule, the result depends only
// on the bytes, never on how they were split across reads: the request
// line's length is checked before its content; field lines are checked
// byte by byte in order, and bytes past MaxHeaderBytes are never looked at.
//
// # Differences from net/http
//
// Differential tests against net/http's ReadRequest (plus the checks its
// Server adds) show the same method, target, headers, body, trailers and
// byte counts on valid requests. baton rejects some requests net/http
// accepts: bare LF line endings (RFC 9112 §2.2 allows accepting them),
// obs-fold, Content-Length together with Transfer-Encoding,
// Transfer-Encoding on HTTP/1.0 (net/http ignores it), versions 1.2-1.9,
// "*" with methods other than OPTIONS, non-ASCII bytes in the target,
// userinfo or IPv6 zones in absolute-form, CONNECT without host:port or
// without Host, chunk extensions that break the grammar, an Expect list
// with anything besides 100-continue, and more than 8 empty lines before a
// request or empty lines ending in a bare LF. net/http's Server skips up to
// 4 bytes of CR or LF before a request only after a POST (ReadRequest
// itself rejects them); baton skips up to 8 CRLFs before any request. The
// one
// request net/http rejects and baton accepts is a chunked request whose
// Trailer header announces Content-Length, Transfer-Encoding or Trailer:
// baton never merges trailer fields into the head, so the announcement is
// harmless.
//
// # Concurrency
//
// Parser, BodyDecoder, WSReader, Request and Date belong to one
// connection (or one event loop) and must be used from one goroutine at a
// time. The functions
// are safe for concurrent use.
package httpcodec
