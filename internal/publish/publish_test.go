package publish

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestLoadsSeeStoresInOrder has one goroutine store two words in turn (a, then b = a) and
// others load them in the opposite order (b, then a): since stores stay in order, a reader
// that sees b = n must then see a >= n.
func TestLoadsSeeStoresInOrder(t *testing.T) {
	var a, b Int64
	const n = 200000
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				vb := b.Load()
				va := a.Load()
				if va < vb {
					errs <- "a reader saw b ahead of a"
					return
				}
			}
		}()
	}
	for i := int64(1); i <= n; i++ {
		a.Store(i)
		b.Store(i)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if a.Load() != n || b.Load() != n {
		t.Fatalf("final values %d, %d", a.Load(), b.Load())
	}
}

func BenchmarkStore(b *testing.B) {
	b.Run("publish", func(b *testing.B) {
		var w Int64
		for i := 0; b.Loop(); i++ {
			w.Store(int64(i))
		}
	})
	b.Run("atomic", func(b *testing.B) {
		var w atomic.Int64
		for i := 0; b.Loop(); i++ {
			w.Store(int64(i))
		}
	})
}
