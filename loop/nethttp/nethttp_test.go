package nethttp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bothModes runs f in single-thread and multi-thread mode.
func bothModes(t *testing.T, f func(t *testing.T, multi bool)) {
	for _, multi := range []bool{false, true} {
		name := "single"
		if multi {
			name = "multi"
		}
		t.Run(name, func(t *testing.T) { f(t, multi) })
	}
}

// httpClient returns a client that follows no redirects, adds no Accept-Encoding, and
// whose idle connections close at the end of the test.
func httpClient(t testing.TB) *http.Client {
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type item struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

// parityMux is a middleware stack as a net/http application has it.
func parityMux(t *testing.T) http.Handler {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello, world\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "page.html"), []byte("<!doctype html><p>page</p>"), 0o644))
	big := bytes.Repeat([]byte("0123456789abcdef"), 8192) // 128 KiB
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "index.html"), []byte("<p>index</p>"), 0o644))
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, f := range []string{"hello.txt", "page.html", "big.bin", "sub/index.html", "sub"} {
		require.NoError(t, os.Chtimes(filepath.Join(dir, f), mtime, mtime))
	}

	mux := http.NewServeMux()
	mux.Handle("/static/", http.StripPrefix("/static/", http.FileServer(http.Dir(dir))))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.Handle("/slow", http.TimeoutHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // TimeoutHandler cancels it
	}), 20*time.Millisecond, "too slow\n"))
	mux.Handle("/quick", http.TimeoutHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Quick", "1")
		fmt.Fprintf(w, "quick %s\n", r.URL.RawQuery)
	}), 10*time.Second, "too slow\n"))
	mux.HandleFunc("GET /api/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		var id int
		if _, err := fmt.Sscan(r.PathValue("id"), &id); err != nil {
			http.Error(w, "bad id", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(item{ID: id, Name: "item-" + r.URL.Query().Get("v")})
	})
	mux.HandleFunc("POST /api/items", func(w http.ResponseWriter, r *http.Request) {
		var it item
		if err := json.NewDecoder(r.Body).Decode(&it); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Location", fmt.Sprintf("/api/items/%d", it.ID))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(it)
	})
	mux.HandleFunc("/api/teapot", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "short and stout", http.StatusTeapot)
	})
	mux.HandleFunc("/api/empty", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/api/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/api/items/1", http.StatusFound)
	})
	mux.HandleFunc("/api/echo-request", func(w http.ResponseWriter, r *http.Request) {
		// What the handler sees of the request (the ports differ: left out).
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		hostHeader, _, _ := net.SplitHostPort(r.Host)
		fmt.Fprintf(w, "%s %s %q %q %s %d %v host=%s remote=%s/%v ua=%q x=%q\n", r.Method, r.URL.Path,
			r.URL.RawQuery, r.RequestURI, r.Proto, r.ContentLength, r.Close, hostHeader, host, err,
			r.Header.Get("User-Agent"), r.Header.Values("X-Multi"))
	})
	mux.HandleFunc("/api/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		for i := range 3000 { // ~60 KiB with no Content-Length: chunked
			fmt.Fprintf(w, "line %05d of the big one\n", i)
		}
	})
	mux.HandleFunc("/api/trailer", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "body with a trailer\n")
		w.Header().Set("X-Checksum", "abc123")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	})
	mux.HandleFunc("/api/sniff", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<html><body>sniffed</body></html>")
	})
	return mux
}

// parityRequest is one request of the parity test.
type parityRequest struct {
	method, path, body string
	header             http.Header
	mask               bool // the body holds live counts: compare it with digits masked
}

var parityRequests = []parityRequest{
	{method: "GET", path: "/static/hello.txt"},
	{method: "HEAD", path: "/static/hello.txt"},
	{method: "GET", path: "/static/page.html"},
	{method: "GET", path: "/static/big.bin"},
	{method: "GET", path: "/static/big.bin", header: http.Header{"Range": {"bytes=100-199"}}},
	{method: "GET", path: "/static/hello.txt", header: http.Header{"If-Modified-Since": {"Fri, 02 Jan 2026 03:04:05 GMT"}}},
	{method: "GET", path: "/static/"},
	{method: "GET", path: "/static"},
	{method: "GET", path: "/static/sub/"},
	{method: "GET", path: "/static/sub/index.html"},
	{method: "GET", path: "/static/missing"},
	{method: "GET", path: "/debug/pprof/cmdline"},
	{method: "GET", path: "/debug/pprof/", mask: true},
	{method: "GET", path: "/slow"},
	{method: "GET", path: "/quick?a=1&b=%20"},
	{method: "GET", path: "/api/items/7?v=x"},
	{method: "GET", path: "/api/items/nope"},
	{method: "PUT", path: "/api/items/7"},
	{method: "POST", path: "/api/items", body: `{"id":42,"name":"answer"}`, header: http.Header{"Content-Type": {"application/json"}}},
	{method: "POST", path: "/api/items", body: `{"id":`},
	{method: "GET", path: "/api/teapot"},
	{method: "GET", path: "/api/empty"},
	{method: "GET", path: "/api/redirect"},
	{method: "GET", path: "/api/echo-request?q=%2F&z", header: http.Header{"User-Agent": {"parity"}, "X-Multi": {"a", "b"}}},
	{method: "POST", path: "/api/echo-request", body: "12345"},
	{method: "GET", path: "/api/big"},
	{method: "GET", path: "/api/trailer"},
	{method: "GET", path: "/api/sniff"},
	{method: "GET", path: "/nowhere"},
}

var digits = regexp.MustCompile(`[0-9]+`)

// TestHTTPAdapterParity serves one net/http middleware stack (ServeMux, StripPrefix,
// FileServer, TimeoutHandler, net/http/pprof, a JSON API) from baton and from
// net/http.Server and compares every response: status, headers but Date, framing, body
// and trailers.
func TestHTTPAdapterParity(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		mux := parityMux(t)
		ref := httptest.NewServer(mux)
		t.Cleanup(ref.Close)
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(t, s, "/", mux) })
		refClient, batonClient := httpClient(t), httpClient(t)
		for _, pr := range parityRequests {
			t.Run(pr.method+" "+pr.path, func(t *testing.T) {
				want := doParity(t, refClient, ref.URL, pr)
				got := doParity(t, batonClient, "http://"+addr, pr)
				assert.Equal(t, want.status, got.status, "status")
				assert.Equal(t, want.header, got.header, "headers (Date aside)")
				assert.Equal(t, want.contentLength, got.contentLength, "Content-Length")
				assert.Equal(t, want.chunked, got.chunked, "chunked framing")
				assert.Equal(t, want.trailer, got.trailer, "trailers")
				if pr.mask {
					want.body, got.body = digits.ReplaceAllString(want.body, "N"), digits.ReplaceAllString(got.body, "N")
				}
				assert.Equal(t, want.body, got.body, "body")
			})
		}
	})
}

type parityResponse struct {
	status        int
	header        http.Header
	contentLength int64
	chunked       bool
	trailer       http.Header
	body          string
}

func doParity(t *testing.T, cl *http.Client, base string, pr parityRequest) parityResponse {
	t.Helper()
	var body io.Reader
	if pr.body != "" {
		body = strings.NewReader(pr.body)
	}
	req, err := http.NewRequest(pr.method, base+pr.path, body)
	require.NoError(t, err)
	for k, vv := range pr.header {
		req.Header[k] = vv
	}
	resp, err := cl.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	h := resp.Header.Clone()
	h.Del("Date")
	return parityResponse{status: resp.StatusCode, header: h, contentLength: resp.ContentLength,
		chunked: len(resp.TransferEncoding) > 0, trailer: resp.Trailer, body: string(b)}
}

// TestHTTPAdapterRequestBody sends large bodies (Content-Length and chunked) that the
// handler reads in small pieces.
func TestHTTPAdapterRequestBody(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		const size = 4 << 20
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sum := sha256.New()
			buf := make([]byte, 4096)
			reads, n := 0, 0
			for {
				k, err := r.Body.Read(buf)
				sum.Write(buf[:k])
				n += k
				if k > 0 {
					reads++
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
			}
			// The body streams: a read may return less than the buffer (a chunk's end).
			fmt.Fprintf(w, "%d %d %v %v %s", r.ContentLength, n, reads >= n/4096, r.TransferEncoding, hex.EncodeToString(sum.Sum(nil)))
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(t, s, "POST /upload", h) })
		payload := make([]byte, size)
		_, _ = rand.Read(payload)
		sum := sha256.Sum256(payload)
		cl := httpClient(t)

		resp, err := cl.Post("http://"+addr+"/upload", "application/octet-stream", bytes.NewReader(payload))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, string(b))
		assert.Equal(t, fmt.Sprintf("%d %d true [] %s", size, size, hex.EncodeToString(sum[:])), string(b))

		// Chunked: a body of unknown length (a pipe).
		pr, pw := io.Pipe()
		go func() {
			for off := 0; off < size; off += 100_000 {
				_, _ = pw.Write(payload[off:min(off+100_000, size)])
			}
			_ = pw.Close()
		}()
		resp, err = cl.Post("http://"+addr+"/upload", "application/octet-stream", pr)
		require.NoError(t, err)
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, string(b))
		assert.Equal(t, fmt.Sprintf("-1 %d true [chunked] %s", size, hex.EncodeToString(sum[:])), string(b))
	})
}

// TestHTTPAdapterStreamedResponse checks that each flushed piece reaches the client
// before the handler writes the next one.
func TestHTTPAdapterStreamedResponse(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		next := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			for i := range 5 {
				fmt.Fprintf(w, "data: piece %d\n", i)
				if err := rc.Flush(); err != nil {
					return
				}
				select {
				case <-next: // the client has read piece i
				case <-r.Context().Done():
					return
				}
			}
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(t, s, "GET /events", h) })
		resp, err := httpClient(t).Get("http://" + addr + "/events")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		br := bufio.NewReader(resp.Body)
		for i := range 5 {
			line, err := br.ReadString('\n') // arrives while the handler waits for next
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("data: piece %d\n", i), line)
			next <- struct{}{}
		}
		rest, err := io.ReadAll(br)
		require.NoError(t, err)
		require.Empty(t, rest)
	})
}

// TestHTTPAdapterSlowClientBlocksHandler streams far more than memory should hold to a
// client that does not read: the handler's goroutine must stop (backpressure) with a
// bounded amount written while the loop keeps serving others; then the client reads
// everything.
func TestHTTPAdapterSlowClientBlocksHandler(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		const total = 256 << 20
		var written atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			for written.Load() < total {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				written.Add(int64(len(chunk)))
			}
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) {
			handle(t, s, "GET /flood", h)
			s.Handle("GET /ping", func(c *loop.Ctx) { c.String(200, "pong") })
		})
		slow := dial(t, addr)
		slow.send("GET /flood HTTP/1.1\r\nHost: t\r\n\r\n")
		// Wait until the handler is held back: its count stops moving.
		last, still := int64(-1), 0
		require.Eventually(t, func() bool {
			n := written.Load()
			if n == last && n > 0 {
				still++
			} else {
				still = 0
			}
			last = n
			return still >= 10
		}, 20*time.Second, 20*time.Millisecond)
		held := written.Load()
		assert.Less(t, held, int64(64<<20), "the handler ran ahead of the client")
		resp, body := dial(t, addr).get("/ping") // the loop is free
		mustStatus(t, resp, 200)
		assert.Equal(t, "pong", body)
		// Now read it all.
		resp2, err := http.ReadResponse(slow.br, nil)
		require.NoError(t, err)
		_ = slow.c.SetReadDeadline(time.Now().Add(60 * time.Second))
		n, err := io.Copy(io.Discard, resp2.Body)
		require.NoError(t, err)
		assert.Equal(t, int64(total), n)
		t.Logf("held back at %d MiB written", held>>20)
	})
}

// TestHTTPAdapterDisconnectCancels checks that a client going away cancels the handler's
// context, and that the shutdown deadline does too.
func TestHTTPAdapterDisconnectCancels(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		started := make(chan struct{}, 1)
		causes := make(chan error, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-r.Context().Done()
			causes <- context.Cause(r.Context())
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(t, s, "GET /wait", h) })
		c := dial(t, addr)
		c.send("GET /wait HTTP/1.1\r\nHost: t\r\n\r\n")
		waitRecv(t, started)
		require.NoError(t, c.c.Close())
		select {
		case err := <-causes:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("the handler's context was not cancelled after the client left")
		}
	})
}

func TestHTTPAdapterShutdownDeadlineCancels(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		started := make(chan struct{}, 1)
		ended := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-r.Context().Done()
			close(ended)
		})
		s := loop.New(loop.Config{Addr: "127.0.0.1:0", MultiThread: multi, Logger: quietLogger(t)})
		handle(t, s, "GET /wait", h)
		errc := serveInBackground(t, s)
		c := dial(t, s.Addr().String())
		c.send("GET /wait HTTP/1.1\r\nHost: t\r\n\r\n")
		waitRecv(t, started)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the deadline has passed already
		assert.ErrorIs(t, s.Shutdown(ctx), context.Canceled)
		waitRecv(t, ended)
		assert.ErrorIs(t, <-errc, loop.ErrServerClosed)
	})
}

// TestHTTPAdapterPanic: a panic before any write is a 500, one after a flush cuts the
// response short; the server goes on serving.
func TestHTTPAdapterPanic(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) {
			handle(t, s, "GET /boom", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Never", "sent")
				panic("boom")
			}))
			handle(t, s, "GET /half", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "half")
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			}))
			handle(t, s, "GET /ok", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "ok")
			}))
		})
		c := dial(t, addr)
		resp, body := c.get("/boom")
		mustStatus(t, resp, 500)
		assert.Empty(t, resp.Header.Get("X-Never"))
		assert.Contains(t, body, "500")
		resp, body = c.get("/ok") // same connection: still served
		mustStatus(t, resp, 200)
		assert.Equal(t, "ok", body)

		h := dial(t, addr)
		h.send("GET /half HTTP/1.1\r\nHost: t\r\n\r\n")
		_, _, err := h.tryRead("GET")
		assert.Error(t, err, "a response cut short must not look complete")

		resp, body = dial(t, addr).get("/ok")
		mustStatus(t, resp, 200)
		assert.Equal(t, "ok", body)
	})
}

// TestHTTPAdapterGateFull: past MaxConcurrent and MaxQueue the client gets 503.
func TestHTTPAdapterGateFull(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		started, release := make(chan struct{}, 1), make(chan struct{})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) {
			mount(t, s, Config{MaxConcurrent: 1, MaxQueue: -1})
			handle(t, s, "GET /hold", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				started <- struct{}{}
				<-release
			}))
		})
		first := dial(t, addr)
		first.send("GET /hold HTTP/1.1\r\nHost: t\r\n\r\n")
		waitRecv(t, started)
		resp, _ := dial(t, addr).get("/hold")
		mustStatus(t, resp, 503)
		assert.Equal(t, "1", resp.Header.Get("Retry-After"))
		close(release)
		resp, _ = first.read("GET")
		mustStatus(t, resp, 200)
	})
}

func TestHTTPAdapterConfigValidate(t *testing.T) {
	err := Config{MaxConcurrent: -1}.Validate()
	require.EqualError(t, err, "nethttp: Config.MaxConcurrent must not be negative, got -1")
	require.NoError(t, Config{MaxQueue: -1}.Validate())
	_, err = New(loop.New(loop.Config{}), Config{MaxConcurrent: -1})
	require.EqualError(t, err, "nethttp: Config.MaxConcurrent must not be negative, got -1", "New returns Validate's error")
}

func waitRecv(t testing.TB, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s")
	}
}

// TestHTTPAdapterResponseController checks what http.ResponseController finds on the
// adapter's writer.
func TestHTTPAdapterResponseController(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			_, hijacker := w.(http.Hijacker)
			_, _, hijackErr := rc.Hijack()
			fmt.Fprintf(w, "hijacker=%v hijack=%v read=%v write=%v duplex=%v flush=%v",
				hijacker, errors.Is(hijackErr, http.ErrNotSupported), rc.SetReadDeadline(time.Now()),
				errors.Is(rc.SetWriteDeadline(time.Now()), http.ErrNotSupported), rc.EnableFullDuplex(), rc.Flush())
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(t, s, "GET /rc", h) })
		resp, body := dial(t, addr).get("/rc")
		mustStatus(t, resp, 200)
		assert.Equal(t, "hijacker=false hijack=true read=<nil> write=true duplex=<nil> flush=<nil>", body)
	})
}

// TestHTTPAdapterBlockedWriterReleasedOnDisconnect: a handler held back by a client that
// reads nothing gets a write error once that client goes away, and returns.
func TestHTTPAdapterBlockedWriterReleasedOnDisconnect(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		var written atomic.Int64
		errs := make(chan error, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			chunk := bytes.Repeat([]byte("y"), 64<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					errs <- err
					return
				}
				written.Add(int64(len(chunk)))
			}
		})
		_, addr := startServer(t, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(t, s, "GET /flood", h) })
		c := dial(t, addr)
		c.send("GET /flood HTTP/1.1\r\nHost: t\r\n\r\n")
		last, still := int64(-1), 0
		require.Eventually(t, func() bool { // held back: the count stops moving
			n := written.Load()
			if n == last && n > 0 {
				still++
			} else {
				still = 0
			}
			last = n
			return still >= 10
		}, 20*time.Second, 20*time.Millisecond)
		require.NoError(t, c.c.Close())
		select {
		case err := <-errs:
			assert.Error(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("the blocked handler's write did not fail after the client left")
		}
	})
}
