package promexport

import (
	"context"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

// baton_ready is 1 while the server serves and 0 once it drains; baton_draining the
// other way round. The scrape is served by promhttp on a listener of its own, which keeps
// answering while the loop drains a request in flight.
func TestDrainingAndReady(t *testing.T) {
	held := make(chan struct{}, 1)
	srv := loop.New(looptest.Config(t, loop.Config{}))
	ev := loop.NewFuture[struct{}](srv.Loop(0))
	srv.Handle("GET /hold", func(c *loop.Ctx) {
		held <- struct{}{}
		_, _ = ev.Await(c, 0)
		c.Bytes(204, "", nil)
	})
	base := looptest.Start(t, srv)
	scrape := adminScrape(t, Registry(srv))
	// Ready once the loop's lag is under its limit, which a busy machine can delay.
	waitFor(t, scrape, "baton_ready 1 and baton_draining 0", func(mfs map[string]*dto.MetricFamily) bool {
		return value(mfs, "baton_ready", nil) == 1 && value(mfs, "baton_draining", nil) == 0
	})

	done := make(chan int, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "/hold")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-held
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	waitFor(t, scrape, "baton_draining 1 and baton_ready 0", func(mfs map[string]*dto.MetricFamily) bool {
		return value(mfs, "baton_draining", nil) == 1 && value(mfs, "baton_ready", nil) == 0
	})
	ev.Resolve(struct{}{}, nil)
	require.Equal(t, 204, <-done, "the request in flight finishes")
	require.NoError(t, <-shut)
}
