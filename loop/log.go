package loop

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// gnetLogger adapts gnet's logger interface to slog. gnet's informational chatter goes to
// Debug so that a server started with defaults logs nothing on a clean start, and so does
// its warning of an event for a connection already closed (staleEvent).
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(format string, args ...any) { g.log(slog.LevelDebug, format, args) }
func (g gnetLogger) Infof(format string, args ...any)  { g.log(slog.LevelDebug, format, args) }
func (g gnetLogger) Warnf(format string, args ...any) {
	level := slog.LevelWarn
	if strings.HasPrefix(format, staleEvent) {
		level = slog.LevelDebug
	}
	g.log(level, format, args)
}
func (g gnetLogger) Errorf(format string, args ...any) { g.log(slog.LevelError, format, args) }
func (g gnetLogger) Fatalf(format string, args ...any) { g.log(slog.LevelError, format, args) }

func (g gnetLogger) log(level slog.Level, format string, args []any) {
	if !g.l.Enabled(context.Background(), level) {
		return
	}
	g.l.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "gnet")
}

// staleEvent begins gnet's warning that epoll reported an event for a descriptor it no
// longer has a connection for (eventloop.run, v2.10.0). It is benign: the connection was
// closed earlier in the same batch of events (at the engine's stop, every connection with
// input pending; a line each), and gnet drops the descriptor from epoll.
const staleEvent = "received event[fd="
