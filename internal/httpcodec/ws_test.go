package httpcodec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wsClientFrame builds a client frame: b0 is the first byte as sent (FIN,
// RSV, opcode), the payload is masked with key, and lenEnc forces the
// length encoding (0: shortest, 7, 16 or 64 bits).
func wsClientFrame(b0 byte, payload []byte, key uint32, lenEnc int) []byte {
	n := len(payload)
	if lenEnc == 0 {
		switch {
		case n <= 125:
			lenEnc = 7
		case n <= 0xffff:
			lenEnc = 16
		default:
			lenEnc = 64
		}
	}
	out := []byte{b0}
	switch lenEnc {
	case 7:
		out = append(out, 0x80|byte(n))
	case 16:
		out = append(out, 0x80|126)
		out = binary.BigEndian.AppendUint16(out, uint16(n))
	case 64:
		out = append(out, 0x80|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	out = binary.LittleEndian.AppendUint32(out, key)
	for i, c := range payload {
		out = append(out, c^byte(key>>(8*(i&3))))
	}
	return out
}

// wsFrame is wsClientFrame with FIN set from fin and the shortest length.
func wsFrame(op WSOpcode, fin bool, payload string) []byte {
	b0 := byte(op)
	if fin {
		b0 |= 0x80
	}
	return wsClientFrame(b0, []byte(payload), 0x12345678, 0)
}

func wsCode(err error) int {
	switch e := err.(type) {
	case nil:
		return 0
	case *WSError:
		return int(e.Code)
	}
	if err == ErrNeedMore {
		return -1
	}
	panic(fmt.Sprintf("unexpected error %T %v", err, err))
}

func TestWSMask(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 200 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		key := r.Uint32()
		want := bytes.Clone(b)
		var k [4]byte
		binary.LittleEndian.PutUint32(k[:], key)
		for i := range want {
			want[i] ^= k[i%4]
		}
		maskWS(b, key)
		require.Equal(t, want, b, "length %d", n)
	}
}

// parseFrameSummary renders ParseWSFrame's result.
func parseFrameSummary(buf []byte, max int64) string {
	var f WSFrame
	n, err := ParseWSFrame(buf, max, &f)
	if err != nil {
		return fmt.Sprintf("err %d", wsCode(err))
	}
	return fmt.Sprintf("n=%d fin=%v op=%v p=%q", n, f.Fin, f.Opcode, f.Payload)
}

func TestParseWSFrame(t *testing.T) {
	big := strings.Repeat("x", 70000)
	cases := []struct {
		name string
		in   []byte
		max  int64
		want string
	}{
		{"text", wsFrame(WSText, true, "hello"), 1 << 20, `n=11 fin=true op=text p="hello"`},
		{"empty binary", wsFrame(WSBinary, true, ""), 1 << 20, `n=6 fin=true op=binary p=""`},
		{"non-final text", wsFrame(WSText, false, "he"), 1 << 20, `n=8 fin=false op=text p="he"`},
		{"continuation", wsFrame(WSContinuation, true, "llo"), 1 << 20, `n=9 fin=true op=continuation p="llo"`},
		{"ping 125", wsFrame(WSPing, true, strings.Repeat("p", 125)), 1 << 20, `n=131 fin=true op=ping p="` + strings.Repeat("p", 125) + `"`},
		{"16-bit length", wsFrame(WSBinary, true, strings.Repeat("y", 126)), 1 << 20, `n=134 fin=true op=binary p="` + strings.Repeat("y", 126) + `"`},
		{"64-bit length", wsFrame(WSBinary, true, big), 1 << 20, fmt.Sprintf("n=%d fin=true op=binary p=%q", 14+len(big), big)},
		{"pong with trailing bytes", append(wsFrame(WSPong, true, "a"), 0x81), 1 << 20, `n=7 fin=true op=pong p="a"`},
		{"control ping over max payload is fine", wsFrame(WSPing, true, "abc"), 1, `n=9 fin=true op=ping p="abc"`},

		{"RSV1", wsClientFrame(0x80|0x40|1, []byte("a"), 1, 0), 1 << 20, "err 1002"},
		{"RSV2", wsClientFrame(0x80|0x20|1, []byte("a"), 1, 0), 1 << 20, "err 1002"},
		{"RSV3", wsClientFrame(0x80|0x10|1, []byte("a"), 1, 0), 1 << 20, "err 1002"},
		{"opcode 3", wsClientFrame(0x80|3, nil, 1, 0), 1 << 20, "err 1002"},
		{"opcode 7", wsClientFrame(0x80|7, nil, 1, 0), 1 << 20, "err 1002"},
		{"opcode 0xB", wsClientFrame(0x80|0xB, nil, 1, 0), 1 << 20, "err 1002"},
		{"opcode 0xF", wsClientFrame(0x80|0xF, nil, 1, 0), 1 << 20, "err 1002"},
		{"fragmented ping", wsClientFrame(byte(WSPing), nil, 1, 0), 1 << 20, "err 1002"},
		{"fragmented close", wsClientFrame(byte(WSClose), nil, 1, 0), 1 << 20, "err 1002"},
		{"ping 126", wsClientFrame(0x80|byte(WSPing), make([]byte, 126), 1, 0), 1 << 20, "err 1002"},
		{"ping with 16-bit length", wsClientFrame(0x80|byte(WSPing), make([]byte, 5), 1, 16), 1 << 20, "err 1002"},
		{"unmasked", []byte{0x81, 0x01, 'a'}, 1 << 20, "err 1002"},
		{"16-bit length under 126", wsClientFrame(0x82, make([]byte, 125), 1, 16), 1 << 20, "err 1002"},
		{"64-bit length under 65536", wsClientFrame(0x82, make([]byte, 200), 1, 64), 1 << 20, "err 1002"},
		{"64-bit length top bit", []byte{0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, 1 << 20, "err 1002"},
		{"64-bit length huge", []byte{0x82, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1 << 20, "err 1009"},
		{"over max", wsFrame(WSText, true, "hello"), 4, "err 1009"},
		{"at max", wsFrame(WSText, true, "hello"), 5, `n=11 fin=true op=text p="hello"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := bytes.Clone(c.in)
			require.Equal(t, c.want, parseFrameSummary(in, c.max))
			checkFrameSplits(t, c.in, c.max, c.want)
		})
	}
}

// checkFrameSplits checks that every prefix of in gives ErrNeedMore (and
// leaves the bytes alone) or the whole input's result, and that the whole
// input after such a prefix gives want.
func checkFrameSplits(t *testing.T, in []byte, max int64, want string) {
	t.Helper()
	for _, k := range append([]int{0}, splitPoints(len(in))...) {
		pre := bytes.Clone(in[:k])
		var f WSFrame
		_, err := ParseWSFrame(pre, max, &f)
		if err == ErrNeedMore {
			require.Equal(t, in[:k], pre, "prefix %d modified", k)
			continue
		}
		require.Equal(t, want, parseFrameSummary(bytes.Clone(in[:k]), max), "prefix %d", k)
	}
}

// readerEvent renders what WSReader.Next reports.
func readerEvent(n int, ok bool, err error, m *WSMessage) string {
	switch {
	case err != nil:
		return fmt.Sprintf("err %d", wsCode(err))
	case !ok:
		return fmt.Sprintf("frag %d", n)
	case m.Opcode == WSClose:
		return fmt.Sprintf("close %d %q", m.CloseCode, m.CloseReason)
	}
	return fmt.Sprintf("%v %q", m.Opcode, m.Payload)
}

// readAll runs a WSReader over in, given in pieces cut at the offsets in
// cuts (each call gets a fresh copy of the bytes received so far, as a
// growing connection buffer would), and returns the events: every
// message and fragment, then the error or "need more".
func readAll(t testing.TB, cfg Config, in []byte, cuts ...int) []string {
	var r WSReader
	r.Init(cfg)
	var m WSMessage
	var out []string
	off := 0
	cuts = append(cuts, len(in))
	for _, c := range cuts {
		if c < off {
			continue
		}
		buf := bytes.Clone(in[off:c])
		for {
			n, ok, err := r.Next(buf, &m)
			if err == ErrNeedMore {
				require.Zero(t, n)
				break
			}
			out = append(out, readerEvent(n, ok, err, &m))
			if err != nil {
				return out
			}
			off += n
			buf = buf[n:]
		}
	}
	if off < len(in) {
		out = append(out, "need more")
	}
	return out
}

func concat(frames ...[]byte) []byte { return bytes.Join(frames, nil) }

func TestWSReader(t *testing.T) {
	euro := "\u20ac" // 3 bytes
	cases := []struct {
		name string
		cfg  Config
		in   []byte
		want []string
	}{
		{"one text", Config{}, wsFrame(WSText, true, "hi"), []string{`text "hi"`}},
		{"fragmented text", Config{},
			concat(wsFrame(WSText, false, "he"), wsFrame(WSContinuation, false, "ll"), wsFrame(WSContinuation, true, "o")),
			[]string{"frag 8", "frag 8", `text "hello"`}},
		{"control between fragments", Config{},
			concat(wsFrame(WSBinary, false, "ab"), wsFrame(WSPing, true, "p"), wsFrame(WSPong, true, ""),
				wsFrame(WSContinuation, true, "c"), wsFrame(WSText, true, "t")),
			[]string{"frag 8", `ping "p"`, `pong ""`, `binary "abc"`, `text "t"`}},
		{"empty fragments", Config{},
			concat(wsFrame(WSText, false, ""), wsFrame(WSContinuation, true, "")),
			[]string{"frag 6", `text ""`}},
		{"code point split across fragments", Config{},
			concat(wsFrame(WSText, false, "a"+euro[:1]), wsFrame(WSContinuation, false, euro[1:2]), wsFrame(WSContinuation, true, euro[2:]+"b")),
			[]string{"frag 8", "frag 7", `text "a€b"`}},
		{"4-byte code point split", Config{},
			concat(wsFrame(WSText, false, "\xf0\x9f"), wsFrame(WSContinuation, true, "\x98\x80")),
			[]string{"frag 8", `text "😀"`}},
		{"invalid UTF-8 one frame", Config{}, wsFrame(WSText, true, "a\xffb"), []string{"err 1007"}},
		{"invalid UTF-8 binary is fine", Config{}, wsFrame(WSBinary, true, "a\xffb"), []string{`binary "a\xffb"`}},
		{"invalid UTF-8 fails fast", Config{},
			concat(wsFrame(WSText, false, "ok"), wsFrame(WSContinuation, false, "\xed\xa0"), wsFrame(WSContinuation, true, "\x80")),
			[]string{"frag 8", "err 1007"}},
		{"surrogate", Config{}, wsFrame(WSText, true, "\xed\xa0\x80"), []string{"err 1007"}},
		{"overlong", Config{}, wsFrame(WSText, true, "\xc0\xaf"), []string{"err 1007"}},
		{"over U+10FFFF", Config{}, wsFrame(WSText, true, "\xf4\x90\x80\x80"), []string{"err 1007"}},
		{"unfinished code point at the end", Config{},
			concat(wsFrame(WSText, false, "a"), wsFrame(WSContinuation, true, "\xe2\x82")),
			[]string{"frag 7", "err 1007"}},
		{"continuation without a message", Config{}, wsFrame(WSContinuation, true, "x"), []string{"err 1002"}},
		{"text during a fragmented message", Config{},
			concat(wsFrame(WSText, false, "a"), wsFrame(WSText, true, "b")),
			[]string{"frag 7", "err 1002"}},
		{"frame over MaxWSFrameBytes", Config{MaxWSFrameBytes: 4, MaxWSMessageBytes: 100},
			wsFrame(WSBinary, true, "12345"), []string{"err 1009"}},
		{"message over MaxWSMessageBytes", Config{MaxWSFrameBytes: 4, MaxWSMessageBytes: 6},
			concat(wsFrame(WSBinary, false, "1234"), wsFrame(WSContinuation, false, "12"), wsFrame(WSContinuation, true, "1")),
			[]string{"frag 10", "frag 8", "err 1009"}},
		{"message at MaxWSMessageBytes", Config{MaxWSFrameBytes: 4, MaxWSMessageBytes: 6},
			concat(wsFrame(WSBinary, false, "1234"), wsFrame(WSPing, true, "0123456789"), wsFrame(WSContinuation, true, "56")),
			[]string{"frag 10", `ping "0123456789"`, `binary "123456"`}},
		{"size resets between messages", Config{MaxWSMessageBytes: 3},
			concat(wsFrame(WSBinary, true, "123"), wsFrame(WSText, false, "12"), wsFrame(WSContinuation, true, "3")),
			[]string{`binary "123"`, "frag 8", `text "123"`}},
		{"close without payload", Config{}, wsFrame(WSClose, true, ""), []string{`close 1005 ""`}},
		{"close with code", Config{}, wsFrame(WSClose, true, "\x03\xe8"), []string{`close 1000 ""`}},
		{"close with reason", Config{}, wsFrame(WSClose, true, "\x0f\xa0bye €"), []string{`close 4000 "bye €"`}},
		{"close 1012", Config{}, wsFrame(WSClose, true, "\x03\xf4"), []string{`close 1012 ""`}},
		{"close payload of 1 byte", Config{}, wsFrame(WSClose, true, "\x03"), []string{"err 1002"}},
		{"close bad reason", Config{}, wsFrame(WSClose, true, "\x03\xe8\xff"), []string{"err 1007"}},
		{"frame after close", Config{}, concat(wsFrame(WSClose, true, ""), wsFrame(WSText, true, "x")),
			[]string{`close 1005 ""`, "err 1002"}},
		{"close between fragments", Config{}, concat(wsFrame(WSText, false, "x"), wsFrame(WSClose, true, "\x03\xe9")),
			[]string{"frag 7", `close 1001 ""`}},
		{"incomplete", Config{}, wsFrame(WSText, true, "hello")[:8], []string{"need more"}},
	}
	for code := range 5100 {
		c := uint16(code)
		if !ValidWSCloseCode(c) && (c < 990 || c > 1020) && c%97 != 0 && c != 2999 && c != 5000 {
			continue
		}
		want := "err 1002"
		if ValidWSCloseCode(c) {
			want = fmt.Sprintf("close %d \"\"", c)
		}
		cases = append(cases, struct {
			name string
			cfg  Config
			in   []byte
			want []string
		}{fmt.Sprintf("close code %d", c), Config{}, wsFrame(WSClose, true, string([]byte{byte(c >> 8), byte(c)})), []string{want}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, readAll(t, c.cfg, c.in), "whole")
			if len(c.in) > 300 {
				return
			}
			for k := 1; k < len(c.in); k++ {
				require.Equal(t, c.want, readAll(t, c.cfg, c.in, k), "split at %d", k)
			}
			cuts := make([]int, len(c.in))
			for i := range cuts {
				cuts[i] = i
			}
			require.Equal(t, c.want, readAll(t, c.cfg, c.in, cuts...), "byte by byte")
		})
	}
}

// TestWSValidCloseCodes spells out the close code rule.
func TestWSValidCloseCodes(t *testing.T) {
	for c := range 70000 {
		code := uint16(c)
		want := code >= 1000 && code <= 1003 || code >= 1007 && code <= 1014 || code >= 3000 && code <= 4999
		require.Equal(t, want, ValidWSCloseCode(code), "code %d", c)
	}
	for _, c := range []uint16{0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000} {
		assert.False(t, ValidWSCloseCode(c), "code %d", c)
	}
}

// TestWSUTF8Pieces checks the incremental UTF-8 check against
// utf8.Valid on every split of inputs into up to three pieces.
func TestWSUTF8Pieces(t *testing.T) {
	inputs := []string{
		"", "a", "héllo", "€uro", "😀x", "日本語テキスト", "\xff", "a\xc3", "\xc3\x28", "\xe2\x82",
		"\xed\x9f\xbf", "\xed\xa0\x80", "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf",
		"\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xe0\x9f\xbf", "\xe0\xa0\x80", "\xf0\x8f\xbf\xbf",
		"\xc1\xbf", "\xc2\x80", "abc\x80", "abcdefgh€ijklmnop", strings.Repeat("é", 20) + "\xe2",
	}
	for _, in := range inputs {
		want := utf8.ValidString(in)
		for i := 0; i <= len(in); i++ {
			for j := i; j <= len(in); j++ {
				var s wsUTF8
				got := s.feed([]byte(in[:i]), false) && s.feed([]byte(in[i:j]), false) && s.feed([]byte(in[j:]), true)
				require.Equal(t, want, got, "%q cut at %d, %d", in, i, j)
			}
		}
	}
}

func TestAppendWSFrame(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 127, 0xffff, 0x10000, 70000} {
		p := bytes.Repeat([]byte{'z'}, n)
		out, err := AppendWSFrame([]byte("prefix"), WSBinary, true, p)
		require.NoError(t, err)
		require.Equal(t, "prefix", string(out[:6]))
		out = out[6:]
		require.Equal(t, WSFrameHeaderLen(n)+n, len(out), "n=%d", n)
		assert.Equal(t, byte(0x82), out[0])
		switch hl := WSFrameHeaderLen(n); hl {
		case 2:
			assert.Equal(t, byte(n), out[1])
		case 4:
			assert.Equal(t, byte(126), out[1])
			assert.Equal(t, uint16(n), binary.BigEndian.Uint16(out[2:]))
		case 10:
			assert.Equal(t, byte(127), out[1])
			assert.Equal(t, uint64(n), binary.BigEndian.Uint64(out[2:]))
		}
		assert.Equal(t, p, out[WSFrameHeaderLen(n):])
	}
	h, err := AppendWSFrameHeader(nil, WSText, false, 3)
	require.NoError(t, err)
	assert.Equal(t, []byte{0x01, 3}, h)
	h, err = AppendWSFrameHeader(nil, WSContinuation, true, 3)
	require.NoError(t, err)
	assert.Equal(t, []byte{0x80, 3}, h)

	bad := []struct {
		op  WSOpcode
		fin bool
		n   int
	}{
		{WSPing, true, 126}, {WSPong, false, 1}, {WSClose, true, 200}, {3, true, 0}, {0xB, true, 0}, {WSText, true, -1},
	}
	for _, b := range bad {
		out, err := AppendWSFrameHeader([]byte("x"), b.op, b.fin, b.n)
		assert.ErrorIs(t, err, ErrWSInvalidFrame, "%v %v %d", b.op, b.fin, b.n)
		assert.Equal(t, "x", string(out))
	}
	out, err := AppendWSFrame(nil, WSPing, true, []byte("ping"))
	require.NoError(t, err)
	assert.Equal(t, "\x89\x04ping", string(out))
}

func TestAppendWSClose(t *testing.T) {
	out, err := AppendWSClose(nil, 0, nil)
	require.NoError(t, err)
	assert.Equal(t, "\x88\x00", string(out))
	out, err = AppendWSClose(nil, WSCloseGoingAway, []byte("bye"))
	require.NoError(t, err)
	assert.Equal(t, "\x88\x05\x03\xe9bye", string(out))
	out, err = AppendWSClose(nil, 4999, bytes.Repeat([]byte{'r'}, 123))
	require.NoError(t, err)
	assert.Len(t, out, 127)
	for _, b := range []struct {
		code   uint16
		reason string
	}{
		{0, "x"}, {1005, ""}, {1006, ""}, {1015, ""}, {999, ""}, {2000, ""}, {5000, ""},
		{1000, strings.Repeat("r", 124)}, {1000, "\xff"},
	} {
		out, err := AppendWSClose([]byte("x"), b.code, []byte(b.reason))
		assert.ErrorIs(t, err, ErrWSInvalidFrame, "%d %q", b.code, b.reason)
		assert.Equal(t, "x", string(out))
	}
}

// TestWSWriterAllocs and TestWSReaderAllocs hold the zero-allocation
// promise of the hot paths.
func TestWSWriterAllocs(t *testing.T) {
	dst := make([]byte, 0, 1<<17)
	p := make([]byte, 70000)
	allocs := testing.AllocsPerRun(100, func() {
		out, _ := AppendWSFrame(dst[:0], WSText, true, p[:10])
		out, _ = AppendWSFrame(out, WSBinary, true, p)
		out, _ = AppendWSFrameHeader(out, WSBinary, false, 300)
		_, _ = AppendWSClose(out, 1000, []byte("bye"))
	})
	assert.Zero(t, allocs)
}

func TestWSReaderAllocs(t *testing.T) {
	stream := concat(wsFrame(WSText, true, "hello"), wsFrame(WSPing, true, "p"),
		wsFrame(WSBinary, false, "ab"), wsFrame(WSContinuation, true, "cd"),
		wsFrame(WSBinary, true, strings.Repeat("b", 1000)))
	var r WSReader
	var m WSMessage
	buf := make([]byte, len(stream))
	run := func() {
		copy(buf, stream) // Next unmasks in place
		for b := buf; len(b) > 0; {
			n, _, err := r.Next(b, &m)
			if err != nil {
				panic(err)
			}
			b = b[n:]
		}
	}
	run() // grows the reassembly buffer once
	assert.Zero(t, testing.AllocsPerRun(100, run))
	var f WSFrame
	one := wsFrame(WSBinary, true, strings.Repeat("b", 1000))
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		copy(buf, one)
		_, _ = ParseWSFrame(buf[:len(one)], 1<<20, &f)
	}))
}

// TestWSReaderBufferKept checks that the reassembly buffer is kept for the
// next fragmented message when small and let go when a big message grew it.
func TestWSReaderBufferKept(t *testing.T) {
	read := func(r *WSReader, part string) string {
		in := concat(wsFrame(WSBinary, false, part), wsFrame(WSContinuation, true, part))
		var m WSMessage
		n, ok, err := r.Next(in, &m)
		require.NoError(t, err)
		require.False(t, ok)
		_, ok, err = r.Next(in[n:], &m)
		require.NoError(t, err)
		require.True(t, ok)
		return string(m.Payload)
	}
	var r WSReader
	assert.Equal(t, "abab", read(&r, "ab"))
	assert.NotZero(t, cap(r.buf))
	big := strings.Repeat("z", wsKeepBufBytes)
	assert.Equal(t, big+big, read(&r, big))
	assert.Zero(t, cap(r.buf))
}
