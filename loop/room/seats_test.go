package room

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResumeToken: a token names its room, player and seat nonce; one signed with another
// key, changed by a byte, cut short or too long is refused with errResumeToken.
func TestResumeToken(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	tok := signResume(key, "arena", "ann", 42)
	room, player, nonce, err := verifyResume(key, tok)
	require.NoError(t, err)
	assert.Equal(t, []any{"arena", "ann", uint64(42)}, []any{room, player, nonce})

	bad := map[string]string{
		"another key":   signResume([]byte(strings.Repeat("x", 32)), "arena", "ann", 42),
		"no dot":        strings.Replace(tok, ".", "", 1),
		"cut short":     tok[:len(tok)-3],
		"too long":      tok + strings.Repeat("A", maxResumeLen),
		"empty":         "",
		"payload byte":  flipTokenByte(tok, 3),
		"signature bit": flipTokenByte(tok, len(tok)-2),
	}
	for name, b := range bad {
		_, _, _, err := verifyResume(key, b)
		assert.ErrorIs(t, err, errResumeToken, name)
	}
}

func flipTokenByte(s string, i int) string {
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// FuzzResumeToken: the parser never panics, and a token it accepts is exactly the one
// signing its fields makes (nothing else passes the MAC).
func FuzzResumeToken(f *testing.F) {
	key := []byte(strings.Repeat("k", 32))
	f.Add(signResume(key, "arena", "ann", 42))
	f.Add(signResume(key, "r", "p", 1))
	f.Add("AQ.AA")
	f.Add(".")
	f.Fuzz(func(t *testing.T, tok string) {
		room, player, nonce, err := verifyResume(key, tok)
		if err != nil {
			require.ErrorIs(t, err, errResumeToken)
			return
		}
		require.Equal(t, signResume(key, room, player, nonce), tok)
	})
}
