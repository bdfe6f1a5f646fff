package loop

import (
	"context"
	"fmt"
	"log/slog"
	"time"
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

// logLimiter rate-limits a kind of log line: at most burst lines, refilled at one per
// every; the rest are counted and the next line that passes says how many were
// suppressed. Callers count every event themselves. Loop-confined.
type logLimiter struct {
	every      int64 // nanoseconds per token
	burst      float64
	tokens     float64
	last       int64
	suppressed uint64
}

func newLogLimiter(burst int, every time.Duration) logLimiter {
	return logLimiter{every: int64(every), burst: float64(burst), tokens: float64(burst)}
}

// allow reports whether a line may be logged at now (loop clock), and how many lines were
// suppressed since the last one allowed.
func (l *logLimiter) allow(now int64) (ok bool, suppressed uint64) {
	if l.last != 0 && now > l.last {
		l.tokens = min(l.burst, l.tokens+float64(now-l.last)/float64(l.every))
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
