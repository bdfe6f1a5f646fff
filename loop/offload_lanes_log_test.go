package loop

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/batonrt/baton/offload"
	"github.com/stretchr/testify/assert"
)

// TestOffloadLanesOffIsLogged (issue 27, item 19): with fewer than 2 offload tokens the
// fast and slow lanes switch off (one token cannot be split), which went without a word.
// The server now says so once at start, naming the setting; with 2 tokens it says nothing.
func TestOffloadLanesOffIsLogged(t *testing.T) {
	for _, tc := range []struct {
		tokens int
		logged bool
	}{{1, true}, {2, false}} {
		var logs syncBuffer
		startServer(t, Config{Offload: offload.Config{Tokens: tc.tokens}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
		line := ""
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "lanes") {
				line = l
			}
		}
		if !tc.logged {
			assert.Empty(t, line, "tokens %d", tc.tokens)
			continue
		}
		assert.Contains(t, line, "level=WARN", "tokens %d", tc.tokens)
		assert.Contains(t, line, "Config.Offload.Tokens", "tokens %d", tc.tokens)
		assert.Contains(t, line, "lanes are off", "tokens %d", tc.tokens)
	}
}
