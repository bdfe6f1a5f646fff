package loop

import (
	"testing"

	"golang.org/x/sys/unix"
)

// touchMemory maps n bytes of anonymous memory and touches every page, so that the
// process's resident set grows by n; release unmaps it.
func touchMemory(t *testing.T, n int) (release func()) {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	for i := 0; i < n; i += unix.Getpagesize() {
		mem[i] = 1
	}
	return func() { _ = unix.Munmap(mem) }
}
