package loop

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/batonrt/baton/accounting"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordSink collects request records from the loop.
func recordSink() (func(*accounting.RequestRecord), <-chan accounting.RequestRecord) {
	ch := make(chan accounting.RequestRecord, 100)
	return func(r *accounting.RequestRecord) {
		cp := *r
		cp.Path = strings.Clone(r.Path)
		ch <- cp
	}, ch
}

func nextRecord(t *testing.T, ch <-chan accounting.RequestRecord) accounting.RequestRecord {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request record after 10s")
	}
	return accounting.RequestRecord{}
}

// rawExchange sends one request on a new connection that closes after it and returns
// every byte the server sent, and the client's address.
func rawExchange(t *testing.T, addr, req string) ([]byte, net.Addr) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_, err = io.WriteString(c, req)
	require.NoError(t, err)
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	return b, c.LocalAddr()
}

// TestRequestRecordsMatchTraffic sends known requests and checks their records.
func TestRequestRecordsMatchTraffic(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		hook, recs := recordSink()
		_, addr := startServer(t, Config{MultiThread: multi, OnRequestDone: hook}, func(s *Server) {
			s.Handle("GET /hello/{name}", func(c *Ctx) { c.String(200, "hello "+c.PathValue("name")) })
			s.Handle("GET /nap", func(c *Ctx) {
				_ = c.Sleep(30 * time.Millisecond)
				c.String(201, "rested")
			})
			s.Handle("GET /stream", func(c *Ctx) {
				w := c.Stream(200, "text/plain")
				for range 3 {
					_, _ = w.Write([]byte(strings.Repeat("s", 1000)))
				}
			})
		})
		out, local := rawExchange(t, addr, "GET /hello/ann?x=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
		r := nextRecord(t, recs)
		assert.Equal(t, "GET", r.Method)
		assert.Equal(t, "GET /hello/{name}", r.Route)
		assert.Equal(t, "/hello/ann", r.Path)
		assert.Equal(t, 200, r.Status)
		assert.Equal(t, int64(len(out)), r.Bytes)
		assert.Equal(t, local.String(), r.Remote.String())
		assert.NotZero(t, r.TaskID)
		assert.GreaterOrEqual(t, r.Rounds, uint64(1))
		assert.Positive(t, r.OnLoop)
		assert.GreaterOrEqual(t, r.Latency, r.OnLoop)
		assert.WithinDuration(t, time.Now(), r.Time, 10*time.Second)

		out, _ = rawExchange(t, addr, "GET /nap HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
		r = nextRecord(t, recs)
		assert.Equal(t, 201, r.Status)
		assert.Equal(t, int64(len(out)), r.Bytes)
		assert.GreaterOrEqual(t, r.Latency, 30*time.Millisecond)
		if !multi { // a multi-thread handler's sleep blocks its goroutine: counted as parked too
			assert.GreaterOrEqual(t, r.Rounds, uint64(2))
		}
		assert.GreaterOrEqual(t, r.Parked, 25*time.Millisecond) // the loop's clock is not the timer's

		out, _ = rawExchange(t, addr, "GET /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
		r = nextRecord(t, recs)
		assert.Equal(t, 200, r.Status)
		assert.Equal(t, int64(len(out)), r.Bytes, "streamed pieces are counted")

		out, _ = rawExchange(t, addr, "GET /nothing HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
		r = nextRecord(t, recs)
		assert.Equal(t, 404, r.Status)
		assert.Equal(t, "", r.Route)
		assert.Equal(t, "/nothing", r.Path)
		assert.Equal(t, int64(len(out)), r.Bytes)
		assert.Zero(t, r.TaskID)
		select {
		case extra := <-recs:
			t.Fatalf("unexpected record %+v", extra)
		default:
		}
	})
}
