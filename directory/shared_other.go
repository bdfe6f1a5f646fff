//go:build !linux

package directory

import "errors"

func openShared(string) (*sharedFile, error) {
	return nil, Unavailable("open", errors.New("a shared directory needs Linux (flock and CLOCK_MONOTONIC)"))
}

func (f *sharedFile) lock() (func(), error) { return nil, errors.New("unsupported") }

func machineClock() int64 { return 0 }
