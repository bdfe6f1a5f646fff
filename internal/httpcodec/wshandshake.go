package httpcodec

import (
	"crypto/sha1"
	"encoding/base64"
)

// wsGUID is the fixed string RFC 6455 §1.3 appends to the client's key.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// WSAcceptLen is the length of a Sec-WebSocket-Accept value.
const WSAcceptLen = 28

// Handshake errors. The 426 answer must carry "Sec-WebSocket-Version: 13"
// (RFC 6455 §4.4); AppendWSVersionHeader supplies it.
var (
	errWSMethod   = newErr(405, "WebSocket upgrade with a method other than GET")
	errWSProto    = newErr(400, "WebSocket upgrade on HTTP/1.0")
	errWSUpgrade  = newErr(400, "not a WebSocket upgrade (Upgrade: websocket and Connection: upgrade required)")
	errWSVersion  = newErr(426, "unsupported Sec-WebSocket-Version (13 required)")
	errWSKey      = newErr(400, "missing, repeated or malformed Sec-WebSocket-Key")
	errWSBody     = newErr(400, "WebSocket upgrade request with a body")
	errWSProtocol = newErr(400, "malformed Sec-WebSocket-Protocol")
)

// IsWSUpgrade reports whether req asks for a WebSocket upgrade: its
// Upgrade header (which the parser records only with a Connection:
// upgrade token) lists the "websocket" protocol. CheckWSUpgrade then says
// whether the request is acceptable. It may be called from any goroutine
// that owns req.
func IsWSUpgrade(req *Request) bool {
	for v := req.Upgrade; len(v) > 0; {
		var e []byte
		e, v = nextElem(v)
		if equalFoldLower(e, "websocket") {
			return true
		}
	}
	return false
}

// CheckWSUpgrade validates a WebSocket opening handshake (RFC 6455
// §4.2.1) and returns the client's Sec-WebSocket-Key, a view into req.
// It requires method GET (else 405), HTTP/1.1 (400), an Upgrade header
// listing "websocket" with a Connection: upgrade token (400), no body
// (400), exactly one Sec-WebSocket-Version, equal to 13 (else 426: answer
// with AppendWSVersionHeader's header), and exactly one
// Sec-WebSocket-Key that is the base64 of 16 bytes (400). Errors are
// *Error values with the status to answer. It does not look at Origin or
// Sec-WebSocket-Protocol (see WSSelectProtocol); it allocates nothing and
// may be called from any goroutine that owns req.
func CheckWSUpgrade(req *Request) (key []byte, err error) {
	if string(req.Method) != "GET" {
		return nil, errWSMethod
	}
	if req.ProtoMinor != 1 {
		return nil, errWSProto
	}
	if !IsWSUpgrade(req) {
		return nil, errWSUpgrade
	}
	if req.Chunked || req.ContentLength > 0 {
		return nil, errWSBody
	}
	var version []byte
	nver, nkey := 0, 0
	for i := range req.Headers {
		h := &req.Headers[i]
		switch len(h.Name) {
		case 17:
			if equalFoldLower(h.Name, "sec-websocket-key") {
				key = h.Value
				nkey++
			}
		case 21:
			if equalFoldLower(h.Name, "sec-websocket-version") {
				version = h.Value
				nver++
			}
		}
	}
	if nver != 1 || string(version) != "13" {
		return nil, errWSVersion
	}
	if nkey != 1 || !validWSKey(key) {
		return nil, errWSKey
	}
	return key, nil
}

// validWSKey reports whether k is the padded base64 of 16 bytes.
func validWSKey(k []byte) bool {
	if len(k) != 24 || k[22] != '=' || k[23] != '=' {
		return false
	}
	var dec [18]byte
	n, err := base64.StdEncoding.Decode(dec[:], k)
	return err == nil && n == 16
}

// AppendWSAccept appends the Sec-WebSocket-Accept value for the client's
// key: base64(SHA-1(key + the RFC 6455 GUID)), WSAcceptLen bytes. It
// allocates nothing when dst has room; it may be called from any
// goroutine.
func AppendWSAccept(dst, key []byte) []byte {
	var sum [sha1.Size]byte
	var in [64]byte // a valid key (24 bytes) and the GUID fit
	if len(key)+len(wsGUID) <= len(in) {
		n := copy(in[:], key)
		n += copy(in[n:], wsGUID)
		sum = sha1.Sum(in[:n])
	} else {
		h := sha1.New()
		h.Write(key)
		h.Write([]byte(wsGUID))
		h.Sum(sum[:0])
	}
	var enc [WSAcceptLen]byte
	base64.StdEncoding.Encode(enc[:], sum[:])
	return append(dst, enc[:]...)
}

// AppendWSUpgradeResponse appends the 101 Switching Protocols response
// head that accepts a WebSocket upgrade: Upgrade: websocket, Connection:
// Upgrade, the Sec-WebSocket-Accept computed from key (as returned by
// CheckWSUpgrade), and Sec-WebSocket-Protocol when subprotocol is not
// empty (it must be a token, one the client offered: see
// WSSelectProtocol), then the empty line. Frames may follow at once. It
// returns ErrInvalidHeader, with dst unchanged, if subprotocol is not a
// token. It allocates nothing when dst has room; it may be called from
// any goroutine.
func AppendWSUpgradeResponse(dst, key, subprotocol []byte) ([]byte, error) {
	if len(subprotocol) > 0 && !ValidHeaderName(subprotocol) {
		return dst, ErrInvalidHeader
	}
	dst = append(dst, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	dst = AppendWSAccept(dst, key)
	if len(subprotocol) > 0 {
		dst = append(dst, "\r\nSec-WebSocket-Protocol: "...)
		dst = append(dst, subprotocol...)
	}
	return append(dst, "\r\n\r\n"...), nil
}

// AppendWSVersionHeader appends "Sec-WebSocket-Version: 13\r\n", the
// header a 426 answer to a handshake with another version must carry. It
// may be called from any goroutine.
func AppendWSVersionHeader(dst []byte) []byte {
	return append(dst, "Sec-WebSocket-Version: 13\r\n"...)
}

// WSProtocolOffers calls yield with each subprotocol the client offers in
// its Sec-WebSocket-Protocol headers, in the client's order of
// preference, until yield returns false. It returns an *Error (400) if an
// offer is not a token or a list element is empty; offers before the
// malformed one have been passed to yield already. It allocates nothing
// and may be called from any goroutine that owns req.
func WSProtocolOffers(req *Request, yield func(proto []byte) bool) error {
	for i := range req.Headers {
		h := &req.Headers[i]
		if len(h.Name) != 22 || !equalFoldLower(h.Name, "sec-websocket-protocol") {
			continue
		}
		for v := h.Value; ; {
			var e []byte
			e, v = nextElem(v)
			if !ValidHeaderName(e) {
				return errWSProtocol
			}
			if !yield(e) {
				return nil
			}
			if v == nil {
				break
			}
		}
	}
	return nil
}

// WSSelectProtocol returns the first subprotocol the client offers
// (client preference first) that is in supported (compared exactly: RFC
// 6455 subprotocol names are case-sensitive), or nil if none is. Every
// offer is checked: a malformed header gives the error WSProtocolOffers
// reports (400) and no choice. The result is a
// view into req, ready for AppendWSUpgradeResponse. It allocates nothing
// and may be called from any goroutine that owns req.
func WSSelectProtocol(req *Request, supported []string) ([]byte, error) {
	var chosen []byte
	err := WSProtocolOffers(req, func(p []byte) bool {
		if chosen != nil {
			return true // the rest is only checked
		}
		for _, s := range supported {
			if string(p) == s {
				chosen = p
				break
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return chosen, nil
}
