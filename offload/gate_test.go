package offload

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// A full gate rejects at once and costs no pool token.
func TestGateRejectsAtOnceWithoutToken(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 2})
		g := NewGate("GET /hot", 1, 0)
		if !g.TryEnter() {
			t.Fatal("empty gate refused")
		}
		var status int
		hs.start(p, "GET /hot", func(c Caller) {
			if !g.TryEnter() {
				status = 503 // with Retry-After
				return
			}
			defer g.Leave()
			Do(c, func(context.Context) (int, error) { return 0, nil })
			status = 200
		}).wait(t)
		if status != 503 {
			t.Fatalf("status %d; want 503", status)
		}
		st := p.Stats().Lanes
		if st[laneFast].Started != 0 || st[laneFast].InUse != 0 || st[laneSlow].Started != 0 {
			t.Fatalf("a rejected request used the pool: %+v", st)
		}
		gs := g.Stats()
		if gs.Name != "GET /hot" || gs.Rejected != 1 || gs.Entered != 1 || gs.InUse != 1 {
			t.Fatalf("gate stats %+v", gs)
		}
		if err := g.Enter(NewGoCaller(context.Background(), p, "k")); err != ErrQueueFull {
			t.Fatalf("Enter with maxQueue 0 on a full gate = %v", err)
		}
		g.Leave()
		if !g.TryEnter() {
			t.Fatal("gate not free after Leave")
		}
		g.Leave()
	})
}

// Enter waits FIFO in a bounded queue; a cancelled waiter leaves it.
func TestGateEnterFIFO(t *testing.T) {
	bothModes(t, func(t *testing.T, hs harness) {
		p := newPool(t, Config{Tokens: 2})
		g := NewGate("g", 1, 4)
		if !g.TryEnter() {
			t.Fatal("TryEnter")
		}
		var mu sync.Mutex
		var order []int
		var handles []*handle
		for i := range 4 {
			handles = append(handles, hs.start(p, "k", func(c Caller) {
				if err := g.Enter(c); err != nil {
					mu.Lock()
					order = append(order, -i)
					mu.Unlock()
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				g.Leave()
			}))
			waitUntil(t, fmt.Sprint(i+1, " queued"), func() bool { return g.Stats().Waiting == i+1 })
		}
		// The queue is full: one more is refused at once, and TryEnter does not jump it.
		var err error
		hs.start(p, "k", func(c Caller) { err = g.Enter(c) }).wait(t)
		if err != ErrQueueFull || g.TryEnter() {
			t.Fatalf("5th Enter = %v / TryEnter jumped the queue", err)
		}
		handles[2].cancel(errGone)
		handles[2].wait(t)
		g.Leave()
		for _, h := range handles {
			h.wait(t)
		}
		if fmt.Sprint(order) != "[-2 0 1 3]" {
			t.Fatalf("order %v; want [-2 0 1 3]", order)
		}
		gs := g.Stats()
		if gs.InUse != 0 || gs.Waiting != 0 || gs.Cancelled != 1 || gs.QueueFull != 1 || gs.Entered != 4 ||
			gs.Wait.Count != 3 || gs.MeanHold <= 0 {
			t.Fatalf("gate stats %+v", gs)
		}
	})
}

func TestGateLeavePanics(t *testing.T) {
	g := NewGate("x", 0, 0)
	defer func() {
		if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), "Leave without") {
			t.Fatalf("recover = %v", v)
		}
	}()
	g.Leave()
}

// TryEnter and Leave are safe for concurrent use and never exceed the size.
func TestGateConcurrent(t *testing.T) {
	g := NewGate("c", 3, 0)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		cur, top int
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				if !g.TryEnter() {
					continue
				}
				mu.Lock()
				cur++
				top = max(top, cur)
				mu.Unlock()
				mu.Lock()
				cur--
				mu.Unlock()
				g.Leave()
			}
		}()
	}
	wg.Wait()
	if top > 3 || g.Stats().InUse != 0 {
		t.Fatalf("top %d in use %d", top, g.Stats().InUse)
	}
}
