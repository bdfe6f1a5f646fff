package ws

import (
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/flate"

	"github.com/batonrt/baton/internal/httpcodec"
)

// permessage-deflate (RFC 7692), with klauspost/compress's flate. Each loop has one
// compressor and one decompressor, reset for every message: no compressor state lives
// between messages, so a connection costs nothing while idle, and a PreparedMessage's
// compressed frame is valid on every connection (encode once). Context takeover, where
// negotiated, is a preset dictionary: on the way out, the last plaintext this connection
// sent compressed (at most deflateOutDict bytes), which the client's decompressor holds in
// its window anyway; on the way in, the last 32 KiB the client sent compressed.

// deflateTail is the end of a sync flush: RFC 7692, 7.2.1, strips it from each compressed
// message; 7.2.2 appends it back before decompressing.
var deflateTail = [4]byte{0x00, 0x00, 0xff, 0xff}

// deflateWindow is the decompressor's window: the client may refer up to 32 KiB back
// (client_max_window_bits 15), so that is what a connection keeps when it takes its
// context over.
const deflateWindow = 1 << 15

// deflateOutDict is the most of its own past output a connection keeps as the dictionary
// of its next compressed message (context takeover); deflateMinDict is how much of it a
// message shorter than that uses. The compressor hashes its dictionary for every message,
// so a longer one costs time: for a 20 Hz game state the last two states give all the
// gain (docs/websocket.md).
const (
	deflateOutDict = 8 << 10
	deflateMinDict = 2 << 10
)

// errDeflateTooBig and errDeflateCorrupt end a connection whose compressed message
// inflates past MaxMessageBytes (1009) or is not valid deflate data (1007).
var (
	errDeflateTooBig  = &httpcodec.WSError{Code: httpcodec.WSCloseMessageTooBig, Reason: "message too big (decompressed)"}
	errDeflateCorrupt = &httpcodec.WSError{Code: httpcodec.WSCloseInvalidPayload, Reason: "invalid compressed data"}
	errDeflateUTF8    = &httpcodec.WSError{Code: httpcodec.WSCloseInvalidPayload, Reason: "text message not valid UTF-8"}
)

// deflateOffer is one permessage-deflate offer of a client (RFC 7692, 7.1).
type deflateOffer struct {
	serverNoTakeover, clientNoTakeover bool
	serverBits                         int // server_max_window_bits, 0 when absent
	clientBits                         int // client_max_window_bits: 0 absent, -1 without a value
}

// errExtensionSyntax is returned for a Sec-WebSocket-Extensions header that is not a list
// of extensions with parameters (RFC 6455, 9.1).
var errExtensionSyntax = errors.New("malformed Sec-WebSocket-Extensions header")

// negotiateDeflate returns the first permessage-deflate offer in the client's
// Sec-WebSocket-Extensions values that the server can accept (found false when none); it
// declines an offer with an unknown or repeated parameter or an invalid value, as RFC
// 7692, 5 and 7.1 ask. A header that does not parse is an error (400).
func negotiateDeflate(values []string) (o deflateOffer, found bool, err error) {
	for _, v := range values {
		err := parseExtensions(v, func(name string, params [][2]string, hasValue []bool) bool {
			if found || !strings.EqualFold(name, "permessage-deflate") {
				return true
			}
			if off, ok := deflateOfferOf(params, hasValue); ok {
				o, found = off, true
			}
			return true
		})
		if err != nil {
			return deflateOffer{}, false, err
		}
	}
	return o, found, nil
}

// deflateOfferOf checks one offer's parameters.
func deflateOfferOf(params [][2]string, hasValue []bool) (o deflateOffer, ok bool) {
	seen := 0
	for i, p := range params {
		bit := 0
		switch strings.ToLower(p[0]) {
		case "server_no_context_takeover":
			bit, o.serverNoTakeover = 1, true
			if hasValue[i] {
				return o, false
			}
		case "client_no_context_takeover":
			bit, o.clientNoTakeover = 2, true
			if hasValue[i] {
				return o, false
			}
		case "server_max_window_bits":
			bit = 4
			if o.serverBits = windowBits(p[1]); !hasValue[i] || o.serverBits == 0 {
				return o, false
			}
		case "client_max_window_bits":
			bit, o.clientBits = 8, -1
			if hasValue[i] {
				if o.clientBits = windowBits(p[1]); o.clientBits == 0 {
					return o, false
				}
			}
		default:
			return o, false
		}
		if seen&bit != 0 {
			return o, false
		}
		seen |= bit
	}
	return o, true
}

// windowBits parses a window-bits value: 8 to 15 without leading zeros (RFC 7692, 7.1.2);
// 0 for anything else.
func windowBits(s string) int {
	if len(s) == 1 && s[0] >= '8' && s[0] <= '9' {
		return int(s[0] - '0')
	}
	if len(s) == 2 && s[0] == '1' && s[1] >= '0' && s[1] <= '5' {
		return 10 + int(s[1]-'0')
	}
	return 0
}

// parseExtensions parses one Sec-WebSocket-Extensions value (RFC 6455, 9.1: a comma list
// of extension-token *(";" token ["=" (token | quoted-string)])) and calls yield with each
// extension's name and parameters (a quoted value unquoted) until yield returns false.
// Empty list elements are skipped, as in any HTTP list.
func parseExtensions(v string, yield func(name string, params [][2]string, hasValue []bool) bool) error {
	var params [][2]string
	var hasValue []bool
	i := 0
	skipWS := func() {
		for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
			i++
		}
	}
	token := func() string {
		s := i
		for i < len(v) && isTokenChar(v[i]) {
			i++
		}
		return v[s:i]
	}
	for {
		skipWS()
		if i == len(v) {
			return nil
		}
		if v[i] == ',' {
			i++
			continue
		}
		name := token()
		if name == "" {
			return errExtensionSyntax
		}
		params, hasValue = params[:0], hasValue[:0]
		for {
			skipWS()
			if i == len(v) || v[i] == ',' {
				break
			}
			if v[i] != ';' {
				return errExtensionSyntax
			}
			i++
			skipWS()
			key := token()
			if key == "" {
				return errExtensionSyntax
			}
			skipWS()
			val, has := "", false
			if i < len(v) && v[i] == '=' {
				i++
				skipWS()
				has = true
				if i < len(v) && v[i] == '"' {
					var ok bool
					if val, ok = quoted(v, &i); !ok {
						return errExtensionSyntax
					}
				} else if val = token(); val == "" {
					return errExtensionSyntax
				}
			}
			params = append(params, [2]string{key, val})
			hasValue = append(hasValue, has)
		}
		if !yield(name, params, hasValue) {
			return nil
		}
	}
}

// quoted reads the quoted-string at v[*i] (its opening quote) and returns its content with
// escapes removed; RFC 7692 wants a token inside, which the parameter checks enforce.
func quoted(v string, i *int) (string, bool) {
	var b strings.Builder
	for j := *i + 1; j < len(v); j++ {
		switch c := v[j]; {
		case c == '"':
			*i = j + 1
			return b.String(), true
		case c == '\\':
			if j+1 == len(v) {
				return "", false
			}
			j++
			b.WriteByte(v[j])
		case c < 0x20 && c != '\t', c == 0x7f:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110, 5.6.2).
func isTokenChar(c byte) bool {
	if c <= ' ' || c >= 0x7f {
		return false
	}
	return !strings.ContainsRune("\"(),/:;<=>?@[\\]{}", rune(c))
}

// deflateConn is the permessage-deflate state of a connection that negotiated it.
// Loop-confined, as its Conn.
type deflateConn struct {
	threshold int  // messages shorter than it go uncompressed
	window    int  // the client's window for our messages (2^server_max_window_bits); 32 KiB unless it limited it
	outTake   bool // server context takeover: outDict is the next message's dictionary
	inTake    bool // client context takeover: inDict is the client's window
	outDict   []byte
	inDict    []byte

	// The message being read: its first frame had RSV1 (compressed) and was text.
	// rewrote says the frame at the input's head had its RSV1 cleared (and a text opcode
	// turned binary, so that the frame reader does not check compressed bytes as UTF-8).
	compressed, text, rewrote bool
}

// agreedDeflate returns the response's extension value and the connection's state for
// offer o under the route's limits.
func agreedDeflate(o deflateOffer, lim *limits) (string, *deflateConn) {
	d := &deflateConn{threshold: lim.compressThreshold, window: deflateWindow,
		outTake: lim.takeover && !o.serverNoTakeover, inTake: lim.takeover && !o.clientNoTakeover}
	resp := "permessage-deflate"
	if !d.outTake {
		resp += "; server_no_context_takeover"
	}
	if !d.inTake {
		resp += "; client_no_context_takeover"
	}
	if o.serverBits != 0 {
		d.window = 1 << o.serverBits
		resp += "; server_max_window_bits=" + strconv.Itoa(o.serverBits)
	}
	return resp, d
}

// terms names what was negotiated, for the stats page: "deflate", then "takeover-out" and
// "takeover-in" for the context kept each way and "window-N" for a window the client
// limited to N bytes.
func (d *deflateConn) terms() string {
	s := "deflate"
	if d.outTake {
		s += " takeover-out"
	}
	if d.inTake {
		s += " takeover-in"
	}
	if d.window < deflateWindow {
		s += " window-" + strconv.Itoa(d.window)
	}
	return s
}

// frameHead looks at the frame at in's start before the frame reader does: the first frame
// of a compressed message has RSV1, which the reader (RFC 6455 only) refuses, so it is
// cleared here and remembered. RSV1 anywhere else (a control or continuation frame) is
// left for the reader to refuse (1002), as it is on a connection that did not negotiate
// compression. Idempotent: the same frame may be looked at again, or its bytes offered
// anew, until it has arrived whole.
func (d *deflateConn) frameHead(in []byte) {
	b0 := in[0]
	op := httpcodec.WSOpcode(b0 & 0x0f)
	if op != httpcodec.WSText && op != httpcodec.WSBinary {
		return
	}
	if b0&0x40 == 0 {
		if !d.rewrote {
			d.compressed = false // a new message, not compressed
		}
		return
	}
	d.compressed, d.text, d.rewrote = true, op == httpcodec.WSText, true
	in[0] = b0&^0x4f | byte(httpcodec.WSBinary)
}

// inflateSrc is a compressed message with the sync-flush tail behind it, as the
// decompressor reads it (an io.ByteReader, so that it is not buffered).
type inflateSrc struct {
	p    []byte
	tail int
}

func (s *inflateSrc) ReadByte() (byte, error) {
	if len(s.p) > 0 {
		b := s.p[0]
		s.p = s.p[1:]
		return b, nil
	}
	if s.tail < len(deflateTail) {
		s.tail++
		return deflateTail[s.tail-1], nil
	}
	return 0, io.EOF
}

func (s *inflateSrc) Read(b []byte) (int, error) {
	n := copy(b, s.p)
	s.p = s.p[n:]
	if n < len(b) && s.tail < len(deflateTail) {
		k := copy(b[n:], deflateTail[s.tail:])
		s.tail += k
		n += k
	}
	if n == 0 && len(b) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// inflate decompresses the compressed message p into the loop's buffer, refusing output
// past max (1009) as soon as it is produced: a small message that inflates to gigabytes
// costs the time and memory of max bytes. The result is valid until the next inflate on
// the loop. Loop-confined.
func (st *loopState) inflate(d *deflateConn, p []byte, limit int64) ([]byte, *httpcodec.WSError) {
	st.src = inflateSrc{p: p}
	var dict []byte
	if d.inTake {
		dict = d.inDict
	}
	if st.inflater == nil {
		st.inflater = flate.NewReader(&st.src)
	}
	if err := st.inflater.(flate.Resetter).Reset(&st.src, dict); err != nil {
		return nil, errDeflateCorrupt
	}
	most := int(min(limit, 1<<40)) + 1 // one byte past the bound shows it passed
	out := st.inflated[:0]
	for len(out) < most {
		if len(out) == cap(out) {
			out = append(out, make([]byte, min(max(cap(out), 4<<10), most-len(out)))...)[:len(out)]
		}
		n, err := st.inflater.Read(out[len(out):min(cap(out), most)])
		out = out[:len(out)+n]
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			// The sync-flush tail, read whole, ends a message without a final block
			// (io.ErrUnexpectedEOF: the decompressor looked for the next block); a final
			// block ends it too (io.EOF).
			if len(st.src.p) > 0 || (err == io.ErrUnexpectedEOF && st.src.tail < len(deflateTail)) {
				return nil, errDeflateCorrupt
			}
			break
		}
		if err != nil {
			return nil, errDeflateCorrupt
		}
	}
	if cap(out) <= maxKeptBuf {
		st.inflated = out[:0]
	} else {
		st.inflated = nil
	}
	if len(out) >= most {
		return nil, errDeflateTooBig
	}
	if d.inTake {
		d.inDict = slide(d.inDict, out, deflateWindow)
	}
	return out, nil
}

// slide appends p to the window w, keeping its last n bytes.
func slide(w, p []byte, n int) []byte {
	if len(p) >= n {
		return append(w[:0], p[len(p)-n:]...)
	}
	if over := len(w) + len(p) - n; over > 0 {
		w = w[:copy(w, w[over:])]
	}
	return append(w, p...)
}

// sliceWriter is an io.Writer appending to a slice.
type sliceWriter struct{ b []byte }

func (s *sliceWriter) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}

// deflateFrame appends to dst the frame of p compressed with dict (RSV1 set, op the
// message's opcode), its references reaching at most window bytes back, or returns ok
// false when compressing does not make p shorter. It uses the loop's compressor (one per
// window a client asked for), reset for each message: no compressor state lives between
// messages, so that a connection keeps none (one costs most of a MiB). Loop-confined.
func (st *loopState) deflateFrame(dst []byte, op httpcodec.WSOpcode, p, dict []byte, window int) (frame []byte, ok bool) {
	// Room for the longest header first: the payload is compressed behind it.
	const room = 10
	st.sw.b = append(dst[:0], make([]byte, room)...)
	fw := st.compressor(window)
	fw.ResetDict(&st.sw, dict)
	// Writing to memory cannot fail; Flush ends with the sync flush RFC 7692, 7.2.1 strips.
	_, _ = fw.Write(p)
	_ = fw.Flush()
	fw.ResetDict(nil, nil) // keep no reference to the connection's dictionary
	b := st.sw.b
	st.sw.b = nil
	n := len(b) - room - len(deflateTail)
	if n >= len(p) {
		return b[:0], false
	}
	hl := httpcodec.WSFrameHeaderLen(n)
	_, _ = httpcodec.AppendWSFrameHeader(b[room-hl:room-hl], op, true, n)
	b[room-hl] |= 0x40 // RSV1: compressed
	if hl == room {
		return b[:room+n], true
	}
	return append(b[:0], b[room-hl:room+n]...), true
}

// compressor returns the loop's compressor for window: BestSpeed for the full 32 KiB, else
// one whose references reach at most window bytes back (server_max_window_bits below 15;
// made when a client first asks for it). Loop-confined.
func (st *loopState) compressor(window int) *flate.Writer {
	if window >= deflateWindow {
		if st.deflater == nil {
			st.deflater, _ = flate.NewWriter(&st.sw, flate.BestSpeed) // a valid level: no error
		}
		return st.deflater
	}
	if st.windowed == nil {
		st.windowed = map[int]*flate.Writer{}
	}
	fw := st.windowed[window]
	if fw == nil {
		fw, _ = flate.NewWriterWindow(&st.sw, window) // 256 to 16 KiB: valid, no error
		st.windowed[window] = fw
	}
	return fw
}

// compressible reports whether a message of n bytes is sent compressed on this
// connection: at least the threshold.
func (d *deflateConn) compressible(n int) bool {
	return n >= d.threshold && n > 0
}

// sharable reports whether a PreparedMessage of n bytes may go to this connection in its
// shared compressed frame: made for a 32 KiB window, its references reach back at most
// over the message itself, so it fits a smaller window the message fits in.
func (d *deflateConn) sharable(n int) bool {
	return d.compressible(n) && (n <= d.window || d.window == deflateWindow)
}

// dict returns the dictionary for a message of n bytes: the connection's recent output
// (context takeover), as long as the message but at least deflateMinDict, and no longer
// than the client's window (the compressor refers no further back).
func (d *deflateConn) dict(n int) []byte {
	if !d.outTake {
		return nil
	}
	keep := min(len(d.outDict), max(n, deflateMinDict), d.window)
	return d.outDict[len(d.outDict)-keep:]
}

// wireLen is the payload length of the server frame f (its header skipped).
func wireLen(f []byte) int {
	switch f[1] & 0x7f {
	case 126:
		return len(f) - 4
	case 127:
		return len(f) - 10
	}
	return len(f) - 2
}

// sentCompressed records p, just sent compressed, in the client's window.
func (d *deflateConn) sentCompressed(p []byte) {
	if d.outTake {
		d.outDict = slide(d.outDict, p, min(deflateOutDict, d.window))
	}
}
