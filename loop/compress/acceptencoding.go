package compress

import "strings"

// coding preferences read from Accept-Encoding (RFC 9110, section 12.5.3), as qvalues in
// thousandths (0 refuses, 1000 is q=1); -1 where the request named no such coding.
type codings struct {
	gzip, identity, star int
}

// noCodings is the state before any Accept-Encoding field is read.
var noCodings = codings{gzip: -1, identity: -1, star: -1}

// add reads one Accept-Encoding field value into p: a comma-separated list of codings,
// each with optional parameters ("gzip;q=0.8"). Names and parameter names compare
// without case, "x-gzip" is "gzip" (RFC 9110, section 8.4.1.3), and an element whose q
// is malformed is skipped, as if it were not there. A coding named twice keeps its
// highest q.
func (p *codings) add(v string) {
	for v != "" {
		var elem string
		if i := strings.IndexByte(v, ','); i >= 0 {
			elem, v = v[:i], v[i+1:]
		} else {
			elem, v = v, ""
		}
		name, params, _ := strings.Cut(elem, ";")
		name = trimOWS(name)
		if name == "" {
			continue // empty list elements are allowed
		}
		q, ok := qParam(params)
		if !ok {
			continue
		}
		var slot *int
		switch {
		case strings.EqualFold(name, "gzip"), strings.EqualFold(name, "x-gzip"):
			slot = &p.gzip
		case strings.EqualFold(name, "identity"):
			slot = &p.identity
		case name == "*":
			slot = &p.star
		default:
			continue // br, zstd, deflate, compress: codings this package does not produce
		}
		if q > *slot {
			*slot = q
		}
	}
}

// gzipOK reports whether the response should be gzip-coded: the request accepts gzip (by
// name, or by "*" when gzip is not named) with a q above zero, and does not prefer
// identity (a higher q for "identity", or for "*" when identity is not named). Identity
// named nowhere is acceptable (RFC 9110, section 12.5.3) but preferred to nothing. A
// tie goes to gzip: fewer bytes for the same preference. Without any Accept-Encoding field
// the answer is no: RFC 9110 lets a server pick any coding then, but clients that send
// none (curl without --compressed, many scripts) do not decode one.
func (p codings) gzipOK() bool {
	g := p.gzip
	if g < 0 {
		g = p.star
	}
	id := p.identity
	if id < 0 {
		id = p.star
	}
	return g > 0 && g >= id
}

// qParam reads the parameters after a coding (";q=0.5", parameters other than q
// ignored) and returns q in thousandths, 1000 when absent; ok is false when a q
// parameter is malformed.
func qParam(params string) (q int, ok bool) {
	q = 1000
	for params != "" {
		var p string
		if i := strings.IndexByte(params, ';'); i >= 0 {
			p, params = params[:i], params[i+1:]
		} else {
			p, params = params, ""
		}
		name, val, _ := strings.Cut(p, "=")
		if !strings.EqualFold(trimOWS(name), "q") {
			continue
		}
		if q, ok = qvalue(trimOWS(val)); !ok {
			return 0, false
		}
	}
	return q, true
}

// qvalue parses a qvalue: "0" or "1", optionally followed by "." and up to three
// digits, and no more than 1 ("1.000").
func qvalue(s string) (int, bool) {
	if s == "" || (s[0] != '0' && s[0] != '1') {
		return 0, false
	}
	q := int(s[0]-'0') * 1000
	if len(s) == 1 {
		return q, true
	}
	if s[1] != '.' || len(s) > 5 {
		return 0, false
	}
	scale := 100
	for i := 2; i < len(s); i++ {
		d := s[i]
		if d < '0' || d > '9' {
			return 0, false
		}
		q += int(d-'0') * scale
		scale /= 10
	}
	if q > 1000 {
		return 0, false
	}
	return q, true
}

// trimOWS trims the optional whitespace (spaces and tabs) of HTTP syntax.
func trimOWS(s string) string { return strings.Trim(s, " \t") }
