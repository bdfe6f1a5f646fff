package directory

import (
	"os"

	"golang.org/x/sys/unix"
)

// openShared opens (makes) the lock file of the shared directory at path.
func openShared(path string) (*sharedFile, error) {
	lk, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &sharedFile{path: path, lk: lk}, nil
}

// lock takes the file's exclusive lock and returns its release.
func (f *sharedFile) lock() (func(), error) {
	for {
		err := unix.Flock(int(f.lk.Fd()), unix.LOCK_EX)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		return func() { _ = unix.Flock(int(f.lk.Fd()), unix.LOCK_UN) }, nil
	}
}

// machineClock reads CLOCK_MONOTONIC, in nanoseconds: the same clock in every process of
// the machine (Go's own monotonic readings count from each process's start).
func machineClock() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("directory: clock_gettime(CLOCK_MONOTONIC): " + err.Error()) // cannot fail on Linux
	}
	return ts.Nano()
}
