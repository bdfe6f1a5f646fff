package loop

import (
	"context"
	"fmt"
	"log/slog"
)

// gnetLogger adapts gnet's logger interface to slog. gnet's informational chatter goes to
// Debug so that a server started with defaults logs nothing on a clean start.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(format string, args ...any) { g.log(slog.LevelDebug, format, args) }
func (g gnetLogger) Infof(format string, args ...any)  { g.log(slog.LevelDebug, format, args) }
func (g gnetLogger) Warnf(format string, args ...any)  { g.log(slog.LevelWarn, format, args) }
func (g gnetLogger) Errorf(format string, args ...any) { g.log(slog.LevelError, format, args) }
func (g gnetLogger) Fatalf(format string, args ...any) { g.log(slog.LevelError, format, args) }

func (g gnetLogger) log(level slog.Level, format string, args []any) {
	if !g.l.Enabled(context.Background(), level) {
		return
	}
	g.l.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "gnet")
}
