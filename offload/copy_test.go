package offload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// eventLog records what happened, in order.
type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (l *eventLog) add(s string) {
	l.mu.Lock()
	l.ev = append(l.ev, s)
	l.mu.Unlock()
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.ev, " ")
}

// taskWriter is a response writer that must be used on the caller's task: with a loop
// Caller it checks (race detector included) that it runs as the handler's task and yields
// once per write, as the loop's chunked writer parks on backpressure.
type taskWriter struct {
	c    Caller
	log  *eventLog
	fail int // fail the write with this index (1-based), 0: never
	n    int
	errs []string
}

var errWrite = errors.New("test: write failed")

func (w *taskWriter) Write(b []byte) (int, error) {
	w.n++
	if lc, ok := w.c.(*loopCaller); ok {
		if lc.l.s.Current() != lc.t {
			w.errs = append(w.errs, "write off the handler's task")
		}
		lc.t.Yield()
	}
	if w.n == w.fail {
		return 0, errWrite
	}
	w.log.add("w:" + string(b))
	return len(b), nil
}

// Copy alternates: one chunk is fetched in the pool, then written on the task, then the
// next is fetched; nothing is buffered ahead.
func TestCopyStreamsChunkByChunk(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 2})
		var log eventLog
		var (
			n   int64
			err error
			w   *taskWriter
		)
		hs.start(p, "GET /file", func(c Caller) {
			w = &taskWriter{c: c, log: &log}
			i := 0
			buf := make([]byte, 0, 8) // reused: Copy is done with a chunk before the next call
			n, err = Copy(c, w, func(ctx context.Context) ([]byte, error) {
				if !inPool(ctx) {
					return nil, errors.New("next not in the pool")
				}
				log.add(fmt.Sprint("n", i))
				buf = fmt.Appendf(buf[:0], "c%d", i)
				i++
				if i == 4 {
					return buf, io.EOF // a last chunk with EOF is written
				}
				return buf, nil
			})
		}).wait(t)
		want := "n0 w:c0 n1 w:c1 n2 w:c2 n3 w:c3"
		if err != nil || n != 8 || log.String() != want || len(w.errs) != 0 {
			t.Fatalf("Copy = %d, %v; events %q (want %q); writer errors %v", n, err, log.String(), want, w.errs)
		}
		if st := p.Stats().Lanes[laneFast]; st.Completed != 4 || st.InUse != 0 {
			t.Fatalf("one pool call per chunk: %+v", st)
		}
	})
}

func TestCopyErrors(t *testing.T) {
	p := newPool(t, Config{Tokens: 2})
	c := NewGoCaller(context.Background(), p, "k")
	var log eventLog
	calls := 0
	next := func(context.Context) ([]byte, error) { calls++; return []byte("x"), nil }
	n, err := Copy(c, &taskWriter{c: c, log: &log, fail: 3}, next)
	if err != errWrite || n != 2 || calls != 3 {
		t.Fatalf("writer error: n %d err %v calls %d", n, err, calls)
	}
	boom := errors.New("boom")
	n, err = Copy(c, &taskWriter{c: c, log: &log}, func(context.Context) ([]byte, error) { return []byte("ab"), boom })
	if err != boom || n != 2 {
		t.Fatalf("next error: n %d err %v", n, err)
	}
	n, err = Copy(c, &taskWriter{c: c, log: &log}, func(context.Context) ([]byte, error) { panic("p") })
	if !errors.Is(err, ErrPanicked) || n != 0 {
		t.Fatalf("panic: n %d err %v", n, err)
	}
}

// seqSource is a blocking iterator with cleanup (a file, a cursor).
type seqSource struct {
	chunks  int
	block   int           // element index at which it waits for unblock (-1: never)
	unblock chan struct{} // closed to let it continue
	blocked chan struct{} // closed when it blocks
	cleaned atomic.Bool
	pulled  atomic.Int32
}

func (s *seqSource) seq() iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		defer s.cleaned.Store(true)
		for i := range s.chunks {
			if i == s.block {
				close(s.blocked)
				<-s.unblock
			}
			s.pulled.Add(1)
			if !yield([]byte(fmt.Sprint("e", i)), nil) {
				return
			}
		}
	}
}

func TestCopySeq(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 2})

		// Drained to the end.
		src := &seqSource{chunks: 3, block: -1}
		var log eventLog
		var n int64
		var err error
		hs.start(p, "GET /seq", func(c Caller) { n, err = CopySeq(c, &taskWriter{c: c, log: &log}, src.seq()) }).wait(t)
		if err != nil || n != 6 || log.String() != "w:e0 w:e1 w:e2" || !src.cleaned.Load() {
			t.Fatalf("CopySeq = %d, %v; %q cleaned %v", n, err, log.String(), src.cleaned.Load())
		}

		// The writer fails: the iterator is stopped in the pool and cleans up.
		src = &seqSource{chunks: 100, block: -1}
		hs.start(p, "GET /seq", func(c Caller) { n, err = CopySeq(c, &taskWriter{c: c, log: &log, fail: 2}, src.seq()) }).wait(t)
		if err != errWrite || n != 2 {
			t.Fatalf("writer error: %d, %v", n, err)
		}
		waitUntil(t, "iterator cleanup", src.cleaned.Load)
		if got := src.pulled.Load(); got != 2 {
			t.Fatalf("pulled %d elements after a failed second write; want 2", got)
		}

		// The caller goes away while an element is being pulled: CopySeq returns at once;
		// the puller stops the iterator when its pull returns.
		src = &seqSource{chunks: 100, block: 2, unblock: make(chan struct{}), blocked: make(chan struct{})}
		h := hs.start(p, "GET /seq", func(c Caller) { n, err = CopySeq(c, &taskWriter{c: c, log: &log}, src.seq()) })
		<-src.blocked
		h.cancel(errGone)
		h.wait(t)
		if err != errGone || n != 4 || src.cleaned.Load() {
			t.Fatalf("cancelled: %d, %v, cleaned early %v", n, err, src.cleaned.Load())
		}
		close(src.unblock)
		waitUntil(t, "iterator cleanup after cancel", src.cleaned.Load)
		waitUntil(t, "tokens back", func() bool { return p.Stats().Lanes[laneFast].InUse == 0 })
	})
}
