package directory

import (
	"os"
	"syscall"
	"unsafe"
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
		err := syscall.Flock(int(f.lk.Fd()), syscall.LOCK_EX)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		return func() { _ = syscall.Flock(int(f.lk.Fd()), syscall.LOCK_UN) }, nil
	}
}

// clockMonotonic is Linux's CLOCK_MONOTONIC clock id.
const clockMonotonic = 1

// machineClock reads CLOCK_MONOTONIC, in nanoseconds: the same clock in every process of
// the machine (Go's own monotonic readings count from each process's start). A raw
// system call: package syscall has no clock_gettime, and the package uses the standard
// library only.
func machineClock() int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("directory: clock_gettime(CLOCK_MONOTONIC): " + errno.Error()) // cannot fail on Linux
	}
	return ts.Nano()
}
