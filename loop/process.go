package loop

import (
	"bytes"
	"os"
	"runtime"
	"strconv"

	"github.com/batonrt/baton/accounting"
)

// The process's figures on the loop page (accounting.LoopSnapshot's Goroutines, RSSBytes
// and OpenFDs). They are read off the loop, where the page is rendered or the snapshot
// handed over: counting /proc/self/fd lists every descriptor, a few milliseconds with tens
// of thousands of connections, which the loop must not pay.

// fillProcess sets l's process figures: the goroutine count everywhere, resident memory
// and open descriptors from /proc/self on Linux (0 elsewhere, or when /proc cannot be
// read). Any goroutine; not the loop's.
func fillProcess(l *accounting.LoopSnapshot) {
	l.Goroutines = runtime.NumGoroutine()
	if runtime.GOOS != "linux" {
		return
	}
	l.RSSBytes = readRSS()
	l.OpenFDs = countFDs()
}

// readRSS returns the resident set size from /proc/self/statm (its second field, in
// pages), or 0.
func readRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// countFDs returns the number of open file descriptors, or 0. Since Linux 6.2 the size
// that stat reports for /proc/self/fd is that number, counted from the descriptor table
// without listing it; listing it (listFDs, the fallback for older kernels, where the size
// is 0) makes a dentry per descriptor, milliseconds with thousands of connections, which
// a process on one CPU takes from its loop however off the loop it runs (docs/bench.md,
// "The descriptor count").
func countFDs() int {
	if fi, err := os.Stat("/proc/self/fd"); err == nil && fi.Size() > 0 {
		return int(fi.Size())
	}
	return listFDs()
}

// listFDs counts the entries of /proc/self/fd, less the one the listing itself holds, or
// returns 0.
func listFDs() int {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(1024)
		n += len(names)
		if err != nil || len(names) == 0 {
			break
		}
	}
	return max(n-1, 0)
}
