package httpcodec

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestValidHeaderValueEveryByteEveryPosition: ValidHeaderValue, which checks eight bytes
// at a time, agrees with the byte table for every byte value at every position of values
// up to 24 bytes long, among valid neighbours that include HTAB, SP, DEL's neighbours and
// obs-text.
func TestValidHeaderValueEveryByteEveryPosition(t *testing.T) {
	for _, fill := range []byte{'a', '\t', ' ', 0x7e, 0x80, 0xff} {
		for n := 1; n <= 24; n++ {
			for pos := range n {
				for b := range 256 {
					v := bytes.Repeat([]byte{fill}, n)
					v[pos] = byte(b)
					require.Equal(t, isValueChar[b], ValidHeaderValue(v), "fill %#x, len %d, byte %#x at %d", fill, n, b, pos)
				}
			}
		}
	}
	assert.True(t, ValidHeaderValue(nil))
	assert.True(t, ValidHeaderValue([]byte("Tue, 24 Nov 2026 02:40:00 GMT")))
	assert.True(t, ValidHeaderValue([]byte("text/plain; charset=utf-8")))
	assert.False(t, ValidHeaderValue([]byte("text/plain\r\nSet-Cookie: x")))
}

// TestHasCtl checks the word test against the bytes of some words built to trip
// borrows: a control byte next to 0x80..0xFF bytes and next to 0x20.
func TestHasCtl(t *testing.T) {
	for _, w := range [][8]byte{
		{0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20},
		{0x1f, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20},
		{0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x1f},
		{0x00, 0xff, 0x80, 0x20, 0x7f, 0x7e, 0x21, 0x09},
		{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		{0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e},
		{0x21, 0x00, 0xa0, 0xa0, 0xa0, 0xa0, 0xa0, 0xa0},
	} {
		want := false
		for _, c := range w {
			want = want || c < 0x20 || c == 0x7f
		}
		x := uint64(0)
		for i := 7; i >= 0; i-- {
			x = x<<8 | uint64(w[i])
		}
		assert.Equal(t, want, hasCtl(x), "% x", w)
	}
}

// FuzzValidHeaderValue: ValidHeaderValue agrees with the byte table on any input.
func FuzzValidHeaderValue(f *testing.F) {
	for _, s := range []string{"", "text/plain", "a\tb c", "x\x00yyyyyyyyy", "yyyyyyyy\x7f", "\xff\xfe\x80\x81aaaaaaa\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if got, want := ValidHeaderValue(v), validValueBytes(v); got != want {
			t.Fatalf("ValidHeaderValue(%q) = %v, the table says %v", v, got, want)
		}
	})
}
