package loop

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestCountFDsAgreesWithTheListing: the descriptor count (stat's size of /proc/self/fd on
// Linux 6.2 and later) is the listing's, and follows descriptors opened and closed.
func TestCountFDsAgreesWithTheListing(t *testing.T) {
	if fi, err := os.Stat("/proc/self/fd"); err != nil || fi.Size() == 0 {
		t.Logf("this kernel reports no size for /proc/self/fd (err %v): countFDs lists it", err)
	}
	// Other goroutines (earlier tests' servers winding down) may open or close a descriptor
	// between two counts: the two must agree in one of a few tries.
	agree := func() (int, int) {
		var c, l int
		for range 5 {
			c, l = countFDs(), listFDs()
			if c == l {
				break
			}
		}
		return c, l
	}
	c0, l0 := agree()
	require.Equal(t, l0, c0, "countFDs against the listing")
	var files []*os.File
	for range 50 {
		f, err := os.Open(os.DevNull)
		require.NoError(t, err)
		files = append(files, f)
	}
	c1, l1 := agree()
	require.Equal(t, l1, c1, "countFDs against the listing, 50 more open")
	assert.InDelta(t, c0+50, c1, 4, "50 descriptors opened")
	for _, f := range files {
		require.NoError(t, f.Close())
	}
	c2, l2 := agree()
	require.Equal(t, l2, c2, "countFDs against the listing, the 50 closed")
	assert.InDelta(t, c0, c2, 4, "50 descriptors closed")
}

// BenchmarkCountFDs: the descriptor count with 4,000 descriptors open (fewer if the
// open-file limit is lower), by stat's size and by the listing.
func BenchmarkCountFDs(b *testing.B) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	n := min(4000, int(lim.Cur)-200)
	var files []*os.File
	for range n {
		f, err := os.Open(os.DevNull)
		if err != nil {
			b.Fatal(err)
		}
		files = append(files, f)
	}
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	for _, c := range []struct {
		name  string
		count func() int
	}{{"count", countFDs}, {"list", listFDs}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if c.count() < n {
					b.Fatalf("%s: fewer than the %d opened", c.name, n)
				}
			}
		})
	}
}
