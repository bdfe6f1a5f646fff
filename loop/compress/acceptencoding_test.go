package compress

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// accepts parses the fields as one request's Accept-Encoding.
func accepts(fields ...string) bool {
	p := noCodings
	for _, f := range fields {
		p.add(f)
	}
	return p.gzipOK()
}

// TestAcceptEncoding: the parser reads names without case, q-values strictly (RFC 9110's
// qvalue: at most three decimals, at most 1), "*" for codings not named, identity's
// preference, and lists split over several fields.
func TestAcceptEncoding(t *testing.T) {
	for _, tc := range []struct {
		fields []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{" , ,"}, false},
		{[]string{"gzip"}, true},
		{[]string{"Gzip"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"deflate, gzip;q=1.0, *;q=0.5"}, true},
		{[]string{"gzip;Q=0"}, false},
		{[]string{"gzip ; q = 0"}, false},
		{[]string{"gzip;q=0."}, false},
		{[]string{"gzip;q=0.0000"}, false}, // four decimals: malformed, skipped
		{[]string{"gzip;q=1.001"}, false},
		{[]string{"gzip;q=1.000"}, true},
		{[]string{"gzip;q=.5"}, false},
		{[]string{"gzip;q=-1"}, false},
		{[]string{"gzip;q="}, false},
		{[]string{"gzip;level=9"}, true}, // parameters other than q ignored
		{[]string{"gzip;q=0.5;foo=bar"}, true},
		{[]string{"gzip;q=0, gzip"}, true}, // named twice: the highest q
		{[]string{"*"}, true},
		{[]string{"*;q=0"}, false},
		{[]string{"*;q=0.3, identity;q=0.4"}, false},
		{[]string{"*;q=0.4, identity;q=0.3"}, true},
		{[]string{"gzip;q=0.2, *;q=0.5"}, false}, // identity gets "*"'s 0.5
		{[]string{"gzip;q=0.2"}, true},           // identity named nowhere: no preference
		{[]string{"identity;q=0"}, false},
		{[]string{"br, zstd", "gzip;q=0.1"}, true},
		{[]string{"gzip", "gzip;q=0"}, true},
		{[]string{"gzipx"}, false},
		{[]string{"gzip\t;\tq=0.9"}, true},
	} {
		assert.Equal(t, tc.want, accepts(tc.fields...), "%q", tc.fields)
	}
}

// FuzzAcceptEncoding checks the parser against a plain reading of RFC 9110 written
// another way (regular expressions, strconv), on any field value: same answer, no panic.
func FuzzAcceptEncoding(f *testing.F) {
	for _, s := range []string{"", "gzip", "gzip;q=0", "x-gzip;q=0.5, identity;q=0.6", "*;q=0, br", "gzip;Q=1.000;a=b",
		"gzip , *;q=0.001", "identity;q=0, *", ";;,,", "gzip;q=1.0001", "gzip;q=0.5;q=0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := accepts(v), referenceAccepts(v); got != want {
			t.Fatalf("Accept-Encoding %q: gzip %v, the reference says %v", v, got, want)
		}
	})
}

var qvalueRE = regexp.MustCompile(`^(0(\.[0-9]{0,3})?|1(\.0{0,3})?)$`)

// referenceAccepts is gzipOK's rule over strings.Split and strconv.
func referenceAccepts(v string) bool {
	q := map[string]float64{}
	for _, elem := range strings.Split(v, ",") {
		parts := strings.Split(elem, ";")
		name := strings.ToLower(strings.Trim(parts[0], " \t"))
		if name == "" {
			continue
		}
		if name == "x-gzip" {
			name = "gzip"
		}
		qv, ok := 1.0, true
		for _, p := range parts[1:] {
			k, val, _ := strings.Cut(p, "=")
			if strings.ToLower(strings.Trim(k, " \t")) != "q" {
				continue
			}
			val = strings.Trim(val, " \t")
			if !qvalueRE.MatchString(val) {
				ok = false
				break
			}
			qv, _ = strconv.ParseFloat(strings.TrimSuffix(val, "."), 64)
		}
		if !ok {
			continue
		}
		if old, seen := q[name]; !seen || qv > old {
			q[name] = qv
		}
	}
	pref := func(name string) (float64, bool) {
		if v, ok := q[name]; ok {
			return v, true
		}
		v, ok := q["*"]
		return v, ok
	}
	g, gok := pref("gzip")
	id, idok := pref("identity")
	if !idok {
		id = 0
	}
	return gok && g > 0 && g >= id
}

// BenchmarkAcceptEncoding: what reading a browser's Accept-Encoding costs.
func BenchmarkAcceptEncoding(b *testing.B) {
	for _, v := range []string{"gzip, deflate, br, zstd", "br;q=1.0, gzip;q=0.8, *;q=0.1"} {
		b.Run(v, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !accepts(v) {
					b.Fatal("refused")
				}
			}
		})
	}
}
