package httpcodec

import "encoding/binary"

// Byte classes used by the parser and the response writer. Each table is
// indexed by a byte and answers one yes/no question, so the hot loops are a
// load and a branch per byte.

// isTchar reports bytes allowed in a token (RFC 9110 §5.6.2):
// "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" /
// "`" / "|" / "~" / DIGIT / ALPHA.
var isTchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// isValueChar reports bytes allowed inside a field value (RFC 9110 §5.5):
// field-vchar (VCHAR / obs-text) plus SP and HTAB. Every other control
// byte, CR, LF, NUL and DEL included, is rejected.
var isValueChar = func() (t [256]bool) {
	for c := 0x21; c <= 0x7e; c++ {
		t[c] = true
	}
	for c := 0x80; c <= 0xff; c++ {
		t[c] = true
	}
	t[' '] = true
	t['\t'] = true
	return t
}()

// isTargetChar reports bytes allowed in a request-target: visible ASCII.
// RFC 3986 allows fewer, but clients send raw "{", "|", "\"" and similar in
// paths and queries, and every server people trust accepts them; controls,
// space, DEL and non-ASCII bytes are rejected.
var isTargetChar = func() (t [256]bool) {
	for c := 0x21; c <= 0x7e; c++ {
		t[c] = true
	}
	return t
}()

// isPathChar reports the request-target bytes other than '?' and '%': the bytes of a path
// that need no second look.
var isPathChar = func() (t [256]bool) {
	t = isTargetChar
	t['?'], t['%'] = false, false
	return t
}()

// isHostChar reports bytes allowed in a Host field value: the bytes of
// uri-host [ ":" port ] (reg-name, IP-literal, IPv4), the same set net/http
// accepts.
var isHostChar = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = isRegNameChar[c]
	}
	for _, c := range "%:[]" {
		t[c] = true
	}
	return t
}()

// isRegNameChar reports unreserved and sub-delims bytes (RFC 3986), the
// characters of a reg-name without percent-encoding.
var isRegNameChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~!$&'()*+,;=" {
		t[c] = true
	}
	return t
}()

// unhex maps hex digits to their value and every other byte to 0xff.
var unhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c - 'a' + 10)
		t[c-'a'+'A'] = byte(c - 'a' + 10)
	}
	return t
}()

// ValidHeaderName reports whether name is a valid field name: a non-empty
// token (RFC 9110 §5.1).
func ValidHeaderName(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if !isTchar[c] {
			return false
		}
	}
	return true
}

// ValidHeaderValue reports whether v may be sent as a field value: every
// byte is visible ASCII, obs-text (0x80-0xFF), SP or HTAB. CR, LF, NUL and
// the other control bytes make it invalid, which is what keeps
// AppendResponseHead safe from header injection. Leading and trailing
// whitespace is allowed (receivers strip it).
//
// It checks eight bytes at a time: a response head carries a few such values
// (Date, Content-Type) per response, and a byte at a time was a measurable
// part of writing one.
func ValidHeaderValue(v []byte) bool {
	for len(v) >= 8 {
		x := binary.LittleEndian.Uint64(v)
		if hasCtl(x) { // parser.go
			// A control byte, DEL, or HTAB (which is allowed): byte by byte.
			if !validValueBytes(v[:8]) {
				return false
			}
		}
		v = v[8:]
	}
	return validValueBytes(v)
}

// validValueBytes is ValidHeaderValue a byte at a time.
func validValueBytes(v []byte) bool {
	for _, c := range v {
		if !isValueChar[c] {
			return false
		}
	}
	return true
}

// equalFoldLower reports whether b equals lower, ignoring ASCII case.
// lower must be lower-case ASCII made of letters, digits and '-'.
func equalFoldLower(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if b[i]|0x20 != lower[i] {
			return false
		}
	}
	return true
}

// equalFold reports whether a equals b ignoring ASCII case.
func equalFold(a []byte, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// trimOWS strips leading and trailing SP and HTAB.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
