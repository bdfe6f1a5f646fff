package ws

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeflateNegotiate: the server takes the first permessage-deflate offer it can accept,
// declines offers RFC 7692 makes it decline, and answers 400 to a header that does not
// parse.
func TestDeflateNegotiate(t *testing.T) {
	lim := limitsOf(&Config{Compression: true})
	take := limitsOf(&Config{Compression: true, CompressionContextTakeover: true})
	const none = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
	for _, tc := range []struct {
		header []string
		lim    *limits
		want   string // "" none accepted, "400" an error
	}{
		{[]string{"permessage-deflate"}, &lim, none},
		{[]string{"permessage-deflate"}, &take, "permessage-deflate"},
		{[]string{"PerMessage-Deflate"}, &take, "permessage-deflate"},
		{[]string{"permessage-deflate; client_max_window_bits"}, &take, "permessage-deflate"},
		{[]string{"permessage-deflate; client_max_window_bits=12"}, &take, "permessage-deflate"},
		{[]string{`permessage-deflate; client_max_window_bits="12"`}, &take, "permessage-deflate"},
		{[]string{"permessage-deflate; client_no_context_takeover"}, &take, "permessage-deflate; client_no_context_takeover"},
		{[]string{"permessage-deflate; server_no_context_takeover"}, &take, "permessage-deflate; server_no_context_takeover"},
		{[]string{"permessage-deflate; server_max_window_bits=8"}, &lim, none + "; server_max_window_bits=8"},
		// Declined offers, then an acceptable one (in a second header line).
		{[]string{"permessage-deflate; server_max_window_bits=16, permessage-deflate; foo", "x-webkit-deflate-frame, permessage-deflate; server_max_window_bits=15"}, &take, "permessage-deflate; server_max_window_bits=15"},
		{[]string{"permessage-deflate; server_max_window_bits"}, &take, ""},
		{[]string{"permessage-deflate; server_max_window_bits=08"}, &take, ""},
		{[]string{"permessage-deflate; client_max_window_bits=7"}, &take, ""},
		{[]string{"permessage-deflate; server_no_context_takeover=1"}, &take, ""},
		{[]string{"permessage-deflate; server_no_context_takeover; server_no_context_takeover"}, &take, ""},
		{[]string{"x-webkit-deflate-frame"}, &take, ""},
		{[]string{""}, &take, ""},
		{[]string{"permessage-deflate;"}, &take, "400"},
		{[]string{"permessage-deflate; a=\"unterminated"}, &take, "400"},
		{[]string{"permessage-deflate x"}, &take, "400"},
		{[]string{"@"}, &take, "400"},
	} {
		o, found, err := negotiateDeflate(tc.header)
		got := ""
		switch {
		case err != nil:
			got = "400"
		case found:
			got, _ = agreedDeflate(o, tc.lim)
		}
		require.Equal(t, tc.want, got, "%q", tc.header)
	}
}

// FuzzDeflateOffer: the extension-header parser never panics, and whatever the server
// answers is itself an offer it would accept, with the same terms.
func FuzzDeflateOffer(f *testing.F) {
	for _, s := range []string{"permessage-deflate", "permessage-deflate; client_max_window_bits",
		"permessage-deflate; server_max_window_bits=10; client_no_context_takeover",
		`permessage-deflate; client_max_window_bits="15", x; y=z`, "a, b;c;d=\"e\\\"\"", ";", ",,"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, header string, takeover bool) {
		lim := limitsOf(&Config{Compression: true, CompressionContextTakeover: takeover})
		o, found, err := negotiateDeflate(strings.Split(header, "\n"))
		if err != nil || !found {
			return
		}
		resp, d := agreedDeflate(o, &lim)
		o2, found2, err := negotiateDeflate([]string{resp})
		require.NoError(t, err, "response %q", resp)
		require.True(t, found2, "response %q", resp)
		resp2, d2 := agreedDeflate(o2, &lim)
		require.Equal(t, resp, resp2)
		require.Equal(t, *d, *d2)
		require.GreaterOrEqual(t, d.window, 1<<8)
		require.LessOrEqual(t, d.window, 1<<15)
		require.False(t, o.serverNoTakeover && d.outTake, "a refused takeover taken")
		require.False(t, o.clientNoTakeover && d.inTake, "a refused takeover expected")
		require.False(t, !takeover && (d.outTake || d.inTake), "takeover not configured")
	})
}

// FuzzDeflateInflate: decompressing arbitrary bytes never panics and never yields more
// than the bound; what deflateFrame makes, for any window, inflates back to its input,
// with and without a dictionary.
func FuzzDeflateInflate(f *testing.F) {
	f.Add([]byte{0}, []byte("hello hello hello"), uint16(64), uint8(15))
	f.Add([]byte{0xff, 0xff}, []byte(strings.Repeat("ab", 300)), uint16(1000), uint8(9))
	f.Fuzz(func(t *testing.T, z, plain []byte, bound uint16, bits uint8) {
		st := &loopState{}
		d := &deflateConn{inTake: true, outTake: true, window: 1 << (8 + bits%8)} // 2^8 to 2^15
		if out, err := st.inflate(d, z, int64(bound)); err == nil {
			require.LessOrEqual(t, len(out), int(bound))
		}
		d.inDict = nil
		for range 2 { // the second with the first as its dictionary
			frame, ok := st.deflateFrame(nil, 2, plain, d.dict(len(plain)), d.window)
			if !ok {
				return
			}
			hl := 2
			switch frame[1] & 0x7f {
			case 126:
				hl = 4
			case 127:
				hl = 10
			}
			require.Equal(t, byte(0xc2), frame[0])
			out, err := st.inflate(d, frame[hl:], 1<<20)
			require.Nil(t, err)
			require.Equal(t, string(plain), string(out))
			d.sentCompressed(plain)
		}
	})
}
