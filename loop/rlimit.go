package loop

import (
	"log/slog"
	"sync"

	"golang.org/x/sys/unix"
)

// lowFileLimit is the hard RLIMIT_NOFILE below which the server warns: 10,000 idle
// keep-alive connections are a normal load for one loop.
const lowFileLimit = 10000

var raiseOnce sync.Once

// raiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit, once per process.
func raiseFileLimit(log *slog.Logger) {
	raiseOnce.Do(func() {
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			log.Warn("loop: cannot read RLIMIT_NOFILE", "err", err)
			return
		}
		if rl.Cur < rl.Max {
			old := rl.Cur
			rl.Cur = rl.Max
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
				log.Warn("loop: cannot raise RLIMIT_NOFILE", "from", old, "to", rl.Max, "err", err)
				return
			}
			log.Debug("loop: raised RLIMIT_NOFILE", "from", old, "to", rl.Cur)
		}
		if rl.Max < lowFileLimit {
			log.Warn("loop: RLIMIT_NOFILE is low: each connection needs a file descriptor", "limit", rl.Max)
		}
	})
}
