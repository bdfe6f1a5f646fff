package offload

import (
	"context"
	"io"
	"iter"
	"sync"
)

// Copy streams a blocking source to w: it runs next in c's pool (as Do does, one pool call
// per chunk) and writes each chunk to w on c's task, until next returns io.EOF (whose
// chunk, if not empty, is written first). It returns the bytes written and the first
// error: next's, w's, or Do's (c cancelled, ErrQueueFull, ErrNested, a panic, ...).
//
// Only one chunk exists at a time, so the body is never buffered whole: w is the loop's
// chunked response writer, which parks the handler while the client is behind, and no
// pool token is held while a chunk is written (a slow client costs no pool capacity).
// next may reuse its buffer: Copy is done with a chunk when it calls next again. Options
// apply to each call of next. Call it from c's own task or goroutine.
func Copy(c Caller, w io.Writer, next func(ctx context.Context) ([]byte, error), opts ...Option) (int64, error) {
	var n int64
	for {
		b, err := Do(c, next, opts...)
		if len(b) > 0 {
			m, werr := w.Write(b)
			n += int64(m)
			if werr == nil && m < len(b) {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return n, werr
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// CopySeq is Copy for a blocking iterator (a file read in chunks, a database cursor): the
// iterator is pulled in the pool, one element per pool call, and each chunk is written to
// w on c's task; the first non-nil error ends the copy. When the copy ends early (an
// error, c cancelled) the iterator is stopped in the pool, never on the loop, so its
// deferred cleanup (closing the file or cursor) may block. Call it from c's own task or
// goroutine.
func CopySeq(c Caller, w io.Writer, seq iter.Seq2[[]byte, error], opts ...Option) (int64, error) {
	ps := &pullState{seq: seq}
	n, err := Copy(c, w, ps.next, opts...)
	h := hook(c)
	ps.finish(h.Pool, h.Key)
	return n, err
}

// pullState drives an iter.Pull2 from pool workers, one element per call, and makes sure
// its stop function runs exactly once, in the pool, even when the copy ended while an
// element was still being pulled.
type pullState struct {
	seq iter.Seq2[[]byte, error]

	mu       sync.Mutex
	pull     func() ([]byte, error, bool)
	stop     func()
	inflight bool // a worker is inside pull
	stopped  bool // stop was called or is scheduled (or never needed)
	stopReq  bool // the copy ended while pulling: the puller calls stop
}

// next pulls one element; it runs on a worker.
func (ps *pullState) next(context.Context) (b []byte, err error) {
	ps.mu.Lock()
	if ps.stopped {
		ps.mu.Unlock()
		return nil, io.EOF
	}
	if ps.pull == nil {
		ps.pull, ps.stop = iter.Pull2(ps.seq)
	}
	ps.inflight = true
	ps.mu.Unlock()
	ok, normal := false, false
	defer func() {
		ps.mu.Lock()
		ps.inflight = false
		doStop := !ps.stopped && (!ok || ps.stopReq || !normal)
		if doStop {
			ps.stopped = true
		}
		ps.mu.Unlock()
		if doStop {
			ps.stop()
		}
	}()
	b, err, ok = ps.pull()
	normal = true
	if !ok {
		return nil, io.EOF
	}
	return b, err
}

// finish stops the iterator after the copy: at once in the pool (detached) if no pull is
// in flight, else by the puller when its pull returns.
func (ps *pullState) finish(p *Pool, key string) {
	ps.mu.Lock()
	if ps.stopped || ps.pull == nil {
		ps.stopped = true
		ps.mu.Unlock()
		return
	}
	if ps.inflight {
		ps.stopReq = true
		ps.mu.Unlock()
		return
	}
	ps.stopped = true
	stop := ps.stop
	ps.mu.Unlock()
	p.detach(key, stop)
}
