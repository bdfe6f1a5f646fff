package loop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 27 item 15: connections racing a Shutdown are answered (200 if they ran before
// the drain, 503 with Connection: close if not) or refused by the kernel; none is accepted
// and then reset or closed without a byte. The listener stops taking new connections when
// the drain begins and what it already took (its backlog included) is answered, instead of
// being reset when the listening socket closes at the stop. Clients connect from many
// goroutines while the drain waits for a slow request, and go on until the port refuses
// them.
func TestDrainAnswersOrRefusesEveryConnection(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(map[int]string{1: "one loop", 2: "two shards"}[shards], func(t *testing.T) {
			s := New(Config{Addr: "127.0.0.1:0", Shards: shards, Logger: quietLogger(t)})
			slow := make(chan struct{}, 1)
			s.Handle("GET /x", func(c *Ctx) { c.String(200, "ok") })
			s.Handle("GET /slow", func(c *Ctx) {
				slow <- struct{}{}
				_ = c.Sleep(300 * time.Millisecond) // the drain waits for it
				c.String(200, "slow")
			})
			errc := serveInBackground(t, s)
			addr := s.Addr().String()

			slowDone := make(chan error, 1)
			go func() {
				resp, err := http.Get("http://" + addr + "/slow")
				if err == nil {
					_ = resp.Body.Close()
				}
				slowDone <- err
			}()
			<-slow

			var answered, refused, ran, connectFailed atomic.Int64
			var mu sync.Mutex
			var bad []string
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 48 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						switch status, err := tryOnce(addr); {
						case err == nil:
							answered.Add(1)
							if status == 200 {
								ran.Add(1)
							}
						case errors.Is(err, syscall.ECONNREFUSED):
							refused.Add(1)
							return // the port is closed: this client is done
						case errors.Is(err, errConnect):
							// connect failed (reset during the handshake): the client sent
							// nothing and knows it, as with a refusal; counted, allowed
							connectFailed.Add(1)
						default:
							mu.Lock()
							bad = append(bad, err.Error())
							mu.Unlock()
						}
					}
				}()
			}
			require.Eventually(t, func() bool { return ran.Load() >= 200 }, 20*time.Second, time.Millisecond)
			// A connection that has sent nothing when the drain begins is answered 503 once
			// its grace ends (or at the stop): the clients above may or may not leave one
			// (new connects are dropped from the drain's start), this one always does.
			nc, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			witness := make(chan int, 1)
			go func() {
				defer func() { _ = nc.Close() }() // as a client does after "Connection: close": the drain waits for it
				_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
				resp, err := http.ReadResponse(newReader(nc), nil)
				if err != nil {
					witness <- 0
					return
				}
				_ = resp.Body.Close()
				witness <- resp.StatusCode
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, s.Shutdown(ctx))
			require.ErrorIs(t, <-errc, ErrServerClosed)
			require.NoError(t, <-slowDone, "the request in flight at the drain")
			require.Equal(t, 503, <-witness, "the connection that had sent nothing when the drain began")
			// Every client ends at a refused connect; bound the wait all the same.
			waited := make(chan struct{})
			go func() { wg.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(20 * time.Second):
				close(stop)
				<-waited
			}
			t.Logf("answered %d (%d ran), refused %d, connect failed %d, accepted and then reset or closed without a response %d",
				answered.Load(), ran.Load(), refused.Load(), connectFailed.Load(), len(bad))
			require.Empty(t, bad, "connections accepted and then reset or closed without a response")
		})
	}
}

// errConnect marks a connect that failed other than by refusal.
var errConnect = errors.New("connect failed")

// tryOnce connects to addr and sends one GET; it returns the response's status, or the
// connect error (ECONNREFUSED once nothing listens), or an error saying how an accepted
// connection failed to give a whole response.
func tryOnce(addr string) (int, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if errors.Is(err, syscall.ECONNRESET) {
		return 0, fmt.Errorf("%w: %w", errConnect, err)
	}
	if err != nil {
		return 0, err
	}
	defer func() { _ = nc.Close() }()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return 0, errors.New("write after connect: " + err.Error())
	}
	resp, err := http.ReadResponse(newReader(nc), nil)
	if err != nil {
		return 0, errors.New("read after connect: " + err.Error())
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.ReadAll(resp.Body); err != nil {
		return 0, errors.New("body: " + err.Error())
	}
	if resp.StatusCode != 200 && resp.StatusCode != 503 {
		return 0, errors.New("status " + resp.Status)
	}
	return resp.StatusCode, nil
}

// A draining server's listeners take no new connection: from the drain's start the SYN of
// a new connection is dropped (its client retries within a second and then finds the port
// closed, or another server on it), so no connection is completed by the kernel only to be
// reset when the listener closes. Every shard's listener (SO_REUSEPORT spreads the
// connects over them). The drain is held open meanwhile; a connect is also allowed to be
// refused, since a listener closes once the drain's grace for handshakes already under
// way has passed. Off Linux there is no SYN filter: the listener only closes after that
// grace.
func TestDrainListenerTakesNoNewConnection(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the listener's SYN filter is Linux only (acceptor.beginDrain)")
	}
	for _, shards := range []int{1, 2} {
		t.Run(map[int]string{1: "one loop", 2: "two shards"}[shards], func(t *testing.T) {
			bothModes(t, func(t *testing.T, multi bool) {
				s := New(Config{Addr: "127.0.0.1:0", Shards: shards, MultiThread: multi, Logger: quietLogger(t)})
				s.Handle("GET /x", func(c *Ctx) { c.String(200, "ok") })
				held := make(chan func(), shards)
				for _, l := range s.Loops() {
					l.OnDrain(func(time.Time) { // on l, after its listener stopped taking connections
						release := l.HoldDrain()
						held <- func() { l.Post(release) }
					})
				}
				errc := serveInBackground(t, s)
				addr := s.Addr().String()
				status, err := tryOnce(addr)
				require.NoError(t, err)
				require.Equal(t, 200, status)

				shut := make(chan error, 1)
				go func() { shut <- s.Shutdown(context.Background()) }()
				var releases []func()
				for range shards {
					releases = append(releases, <-held)
				}
				// Every shard is draining and held: new connects must not complete.
				var wg sync.WaitGroup
				connected := make(chan string, 16)
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						nc, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
						if err == nil {
							connected <- nc.LocalAddr().String()
							_ = nc.Close()
							return
						}
						var ne net.Error
						if !errors.Is(err, syscall.ECONNREFUSED) && !(errors.As(err, &ne) && ne.Timeout()) {
							connected <- "unexpected error: " + err.Error()
						}
					}()
				}
				wg.Wait()
				close(connected)
				var got []string
				for c := range connected {
					got = append(got, c)
				}
				require.Empty(t, got, "connections the draining listener took (they would be answered 503, or reset when it closes)")

				for _, release := range releases {
					release()
				}
				require.NoError(t, <-shut)
				require.ErrorIs(t, <-errc, ErrServerClosed)
				_, err = net.DialTimeout("tcp", addr, 5*time.Second)
				require.ErrorIs(t, err, syscall.ECONNREFUSED, "the port is closed once the server stopped")
			})
		})
	}
}
