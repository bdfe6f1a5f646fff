package compress

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/offload"
)

// TestFullPoolSendsUncoded: when the offload pool cannot take the compression (its one
// token held, no queue), the body goes out uncoded at once, still varying by
// Accept-Encoding, and Bytes returns offload.ErrQueueFull.
func TestFullPoolSendsUncoded(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			holding := make(chan struct{})
			release := make(chan struct{})
			errs := make(chan error, 1)
			s := loop.New(loopConfig(t, loop.Config{MultiThread: mt, Offload: offload.Config{Tokens: 1, MaxWaiting: -1}}))
			s.Handle("GET /hold", func(c *loop.Ctx) {
				_, err := offload.Do(c, func(context.Context) (int, error) {
					close(holding)
					<-release
					return 0, nil
				})
				must(err)
				c.String(200, "held")
			})
			s.Handle("GET /text", func(c *loop.Ctx) { errs <- Bytes(c, 200, "text/plain", []byte(bigText)) })
			url := start(t, s)

			held := make(chan string, 1)
			go func() {
				resp, err := plain.Get(url + "/hold")
				if err != nil {
					held <- err.Error()
					return
				}
				_ = resp.Body.Close()
				held <- resp.Status
			}()
			<-holding
			resp, raw := get(t, plain, "GET", url+"/text", "gzip")
			assert.Empty(t, resp.Header.Get("Content-Encoding"))
			assert.Equal(t, []string{"Accept-Encoding"}, resp.Header.Values("Vary"))
			assert.Equal(t, bigText, string(raw))
			assert.ErrorIs(t, <-errs, offload.ErrQueueFull)
			close(release)
			assert.Equal(t, "200 OK", <-held)

			// With the token free again, the same request is coded.
			resp, raw = get(t, plain, "GET", url+"/text", "gzip")
			assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
			assert.Equal(t, bigText, string(gunzip(t, raw)))
			assert.NoError(t, <-errs)
		})
	}
}

// TestClientGoneWhileCompressing: a client that leaves while its body is compressed
// cancels the call: Bytes returns an error at once (the worker is still inside the
// compression), nothing panics, and the worker stops at its next chunk (goleak, in
// TestMain, checks that it ended).
func TestClientGoneWhileCompressing(t *testing.T) {
	huge := bytes.Repeat([]byte(bigText), 1<<20/len(bigText)+1)
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			started := make(chan struct{})
			release := make(chan struct{})
			var once sync.Once
			hookCompressing = func() {
				once.Do(func() {
					close(started)
					<-release
				})
			}
			t.Cleanup(func() { hookCompressing = nil })
			var releaseOnce sync.Once
			t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // runs before the server's shutdown
			errs := make(chan error, 1)
			s := loop.New(loopConfig(t, loop.Config{MultiThread: mt}))
			s.Handle("GET /huge", func(c *loop.Ctx) { errs <- Bytes(c, 200, "text/plain", huge) })
			url := start(t, s)

			conn := dial(t, url)
			conn.Send("GET /huge HTTP/1.1\r\nHost: test\r\nAccept-Encoding: gzip\r\n\r\n")
			<-started
			require.NoError(t, conn.Raw().Close())
			select {
			case err := <-errs:
				assert.Error(t, err, "the cancelled compression is reported")
			case <-time.After(10 * time.Second): // a bound on a failure, not a timing
				t.Fatal("Bytes did not return after its client left")
			}
			releaseOnce.Do(func() { close(release) })

			// The server still serves.
			resp, raw := get(t, plain, "GET", url+"/huge", "gzip")
			assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
			assert.Equal(t, huge, gunzip(t, raw))
			assert.NoError(t, <-errs)
		})
	}
}
