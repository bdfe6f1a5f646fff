package loop

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestGnetLoggerLevels: gnet's chatter and its stale-event warning (one line per
// connection with input pending at the engine's stop) are Debug; its other warnings and
// errors stay what they are.
func TestGnetLoggerLevels(t *testing.T) {
	var logs syncBuffer
	g := gnetLogger{slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	// The format of gnet v2.10.0's eventloop.run, as it calls Warnf.
	g.Warnf("received event[fd=%d|ev=%d|flags=%d] of a stale connection from event-loop(%d)", 2994, 25, 0, 0)
	g.Infof("engine is running with %d event loops", 1)
	assert.Empty(t, logs.String())

	g.Warnf("something else: %d", 7)
	g.Errorf("event-loop(%d) is exiting due to error: %v", 0, "boom")
	assert.Contains(t, logs.String(), "something else: 7")
	assert.Contains(t, logs.String(), "exiting due to error: boom")
	assert.Contains(t, logs.String(), "component=gnet")
}
