package offload

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestQueued: Queued counts the calls waiting for a token, the same figure as the lanes'
// Waiting summed, and drops to zero once they have run.
func TestQueued(t *testing.T) {
	p := newPool(t, Config{Tokens: 1})
	block := make(chan struct{})
	started := make(chan struct{}, 8)
	done := make(chan struct{}, 8)
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			_, _ = Do(NewGoCaller(context.Background(), p, "GET /q"), func(context.Context) (int, error) {
				started <- struct{}{}
				<-block
				return 0, nil
			})
		}()
	}
	<-started
	waitUntil(t, "3 queued", func() bool { return p.Queued() == 3 })
	st := p.Stats()
	sum := 0
	for _, l := range st.Lanes {
		sum += l.Waiting
	}
	assert.Equal(t, 3, sum, "Queued agrees with Stats")
	close(block)
	for range 4 {
		<-done
	}
	assert.Equal(t, 0, p.Queued(), fmt.Sprint(p.Stats().Lanes))
}
