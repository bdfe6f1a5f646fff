package compress

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// entry is a row of the leaderboard the tests answer with.
type entry struct {
	Rank   int     `json:"rank"`
	Player string  `json:"player"`
	Score  int     `json:"score"`
	Ratio  float64 `json:"ratio"`
	Region string  `json:"region"`
}

// leaderboard returns n rows.
func leaderboard(n int) []entry {
	es := make([]entry, n)
	for i := range es {
		es[i] = entry{i + 1, fmt.Sprintf("player-%05d", (i*7919)%100000), 1000000 - i*37, float64(i%97) / 97, []string{"eu", "us", "ap"}[i%3]}
	}
	return es
}

// jsonOf is what Ctx.JSON sends for v.
func jsonOf(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return append(b, '\n')
}

var (
	board     = leaderboard(800) // about 60 KiB of JSON
	bigText   = strings.Repeat("the quick brown fox jumps over the lazy dog\n", 400)
	noise     = randomText()
	smallText = strings.Repeat("x", 1023) // one byte below the default MinSize
)

// randomText is 8 KiB of random bytes labelled as text: gzip cannot make it smaller.
func randomText() []byte {
	b := make([]byte, 8<<10)
	_, _ = rand.Read(b)
	return b
}

// routes answers through the package on every route the tests ask for.
func routes(s *loop.Server) {
	s.Handle("GET /text", func(c *loop.Ctx) { must(Bytes(c, 200, "text/plain; charset=utf-8", []byte(bigText))) })
	s.Handle("GET /json", func(c *loop.Ctx) { must(JSON(c, 200, board)) })
	s.Handle("GET /notfound", func(c *loop.Ctx) { must(Bytes(c, 404, "text/html", []byte(bigText))) })
	s.Handle("GET /small", func(c *loop.Ctx) { must(Bytes(c, 200, "text/plain", []byte(smallText))) })
	s.Handle("GET /png", func(c *loop.Ctx) { must(Bytes(c, 200, "image/png", []byte(bigText))) })
	s.Handle("GET /untyped", func(c *loop.Ctx) { must(Bytes(c, 200, "", []byte(bigText))) })
	s.Handle("GET /noise", func(c *loop.Ctx) { must(Bytes(c, 200, "text/plain", noise)) })
	s.Handle("GET /partial", func(c *loop.Ctx) {
		c.SetHeader("Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(bigText)-1, 2*len(bigText)))
		must(Bytes(c, 206, "text/plain", []byte(bigText)))
	})
	s.Handle("GET /204", func(c *loop.Ctx) { must(Bytes(c, 204, "text/plain", []byte(bigText))) })
	s.Handle("GET /304", func(c *loop.Ctx) { must(Bytes(c, 304, "text/plain", []byte(bigText))) })
	s.Handle("GET /unencodable", func(c *loop.Ctx) {
		if JSON(c, 200, map[string]any{"f": func() {}}) == nil {
			panic("JSON encoded a func")
		}
	})
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// serve starts a server in the given mode with the routes add adds.
func serve(t *testing.T, mt bool, add func(s *loop.Server)) string {
	t.Helper()
	s := loop.New(loopConfig(t, loop.Config{MultiThread: mt}))
	add(s)
	return start(t, s)
}

// loopConfig is looptest.Config.
func loopConfig(t *testing.T, cfg loop.Config) loop.Config { return looptest.Config(t, cfg) }

// start serves s and returns its base URL; the clients' idle connections are closed
// before the server shuts down.
func start(t *testing.T, s *loop.Server) string {
	t.Helper()
	url := looptest.Start(t, s)
	t.Cleanup(plain.CloseIdleConnections)
	t.Cleanup(decoding.CloseIdleConnections)
	return url
}

// dial opens a raw connection to the server at url.
func dial(t *testing.T, url string) *looptest.Conn {
	return looptest.Dial(t, strings.TrimPrefix(url, "http://"))
}

var (
	// decoding asks for gzip and decodes it, as net/http's client does by default.
	decoding = &http.Client{Timeout: 20 * time.Second}
	// plain shows the bytes on the wire.
	plain = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableCompression: true}}
)

// get sends method url with cl and the Accept-Encoding fields given (none for nil) and
// returns the response with its body read.
func get(t *testing.T, cl *http.Client, method, url string, acceptEncoding ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	for _, v := range acceptEncoding {
		req.Header.Add("Accept-Encoding", v)
	}
	resp, err := cl.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, body
}

// gunzip decodes a gzip body.
func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	out, err := io.ReadAll(zr)
	require.NoError(t, err)
	return out
}

// TestCompressOverTheWire: in both modes, large bodies of compressible types are gzip-coded
// for clients that accept gzip (net/http's client decodes them transparently; the raw
// bytes are gzip with the right headers), and sent as they are otherwise, with
// Vary: Accept-Encoding on every response that could have been coded.
func TestCompressOverTheWire(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			url := serve(t, mt, routes)

			// net/http's client asks for gzip and decodes: the body arrives whole.
			resp, body := get(t, decoding, "GET", url+"/json")
			assert.Equal(t, 200, resp.StatusCode)
			assert.True(t, resp.Uncompressed, "net/http's client decoded a gzip body")
			assert.Equal(t, jsonOf(t, board), body)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			resp, body = get(t, decoding, "GET", url+"/text")
			assert.True(t, resp.Uncompressed)
			assert.Equal(t, bigText, string(body))

			// The bytes on the wire.
			for _, path := range []string{"/json", "/text", "/notfound"} {
				resp, raw := get(t, plain, "GET", url+path, "gzip")
				assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"), path)
				assert.Equal(t, []string{"Accept-Encoding"}, resp.Header.Values("Vary"), path)
				assert.EqualValues(t, len(raw), resp.ContentLength, path)
				want := []byte(bigText)
				if path == "/json" {
					want = jsonOf(t, board)
				}
				assert.Equal(t, want, gunzip(t, raw), path)
				assert.Less(t, len(raw)*4, len(want), "%s: coded %d of %d bytes", path, len(raw), len(want))
			}
			resp, _ = get(t, plain, "GET", url+"/notfound", "gzip")
			assert.Equal(t, 404, resp.StatusCode, "the status is kept")

			// What Accept-Encoding asks for decides, q-values included.
			for _, tc := range []struct {
				ae   []string
				gzip bool
			}{
				{nil, false}, // no header: identity (clients that send none do not decode)
				{[]string{""}, false},
				{[]string{"gzip"}, true},
				{[]string{"GZIP"}, true},
				{[]string{"x-gzip"}, true},
				{[]string{"gzip, deflate, br, zstd"}, true},
				{[]string{"gzip;q=0"}, false},
				{[]string{"gzip; q=0.000"}, false},
				{[]string{"gzip;q=0.001"}, true},
				{[]string{"*"}, true},
				{[]string{"*;q=0"}, false},
				{[]string{"*;q=0, identity"}, false},
				{[]string{"gzip;q=0, *"}, false}, // gzip named: "*" does not cover it
				{[]string{"br;q=1, *;q=0.1"}, true},
				{[]string{"identity"}, false},
				{[]string{"identity;q=0, gzip;q=0.1"}, true},
				{[]string{"gzip;q=0.5, identity"}, false}, // identity preferred
				{[]string{"gzip;q=0.5, identity;q=0.5"}, true},
				{[]string{"br", "gzip"}, true}, // one list over two fields
				{[]string{"gzip;q=2"}, false},  // malformed q: the element is skipped
				{[]string{"gzip;q=0.5.5"}, false},
				{[]string{"deflate, br"}, false},
			} {
				resp, raw := get(t, plain, "GET", url+"/text", tc.ae...)
				assert.Equal(t, []string{"Accept-Encoding"}, resp.Header.Values("Vary"), "%q", tc.ae)
				if tc.gzip {
					assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"), "%q", tc.ae)
					assert.Equal(t, bigText, string(gunzip(t, raw)), "%q", tc.ae)
				} else {
					assert.Empty(t, resp.Header.Get("Content-Encoding"), "%q", tc.ae)
					assert.Equal(t, bigText, string(raw), "%q", tc.ae)
				}
			}

			// Untouched: small bodies, types not listed (or none), 206, 204 and 304; no Vary,
			// since they would not be coded for any client.
			for _, path := range []string{"/small", "/png", "/untyped", "/partial", "/204", "/304"} {
				resp, raw := get(t, plain, "GET", url+path, "gzip")
				assert.Empty(t, resp.Header.Get("Content-Encoding"), path)
				assert.Empty(t, resp.Header.Values("Vary"), path)
				switch path {
				case "/small":
					assert.Equal(t, smallText, string(raw))
				case "/204", "/304":
					assert.Empty(t, raw, path)
				default:
					assert.Equal(t, bigText, string(raw), path)
				}
			}

			// Incompressible: sent as it is, still varying by Accept-Encoding.
			resp, raw := get(t, plain, "GET", url+"/noise", "gzip")
			assert.Empty(t, resp.Header.Get("Content-Encoding"))
			assert.Equal(t, []string{"Accept-Encoding"}, resp.Header.Values("Vary"))
			assert.Equal(t, noise, raw)

			// HEAD: no body is coded; the head describes the uncoded body and varies.
			resp, raw = get(t, plain, "HEAD", url+"/json", "gzip")
			assert.Equal(t, 200, resp.StatusCode)
			assert.Empty(t, resp.Header.Get("Content-Encoding"))
			assert.Equal(t, []string{"Accept-Encoding"}, resp.Header.Values("Vary"))
			assert.EqualValues(t, len(jsonOf(t, board)), resp.ContentLength)
			assert.Empty(t, raw)

			// A value JSON cannot encode is answered as Ctx.JSON answers it.
			resp, raw = get(t, plain, "GET", url+"/unencodable", "gzip")
			assert.Equal(t, 500, resp.StatusCode)
			assert.Equal(t, "500 Internal Server Error\n", string(raw))
		})
	}
}

// TestConfigMiddleware: New's middleware sets the Config of the routes it covers (a
// Group here); routes outside it keep the defaults.
func TestConfigMiddleware(t *testing.T) {
	mw, err := New(Config{Level: 9, MinSize: 100, Types: []string{"application/octet-stream", "Text/*"}})
	require.NoError(t, err)
	body := bytes.Repeat([]byte("ab"), 100) // 200 bytes
	url := serve(t, false, func(s *loop.Server) {
		g := s.Group("/tuned", mw)
		g.Handle("GET /bin", func(c *loop.Ctx) { must(Bytes(c, 200, "application/octet-stream", body)) })
		g.Handle("GET /csv", func(c *loop.Ctx) { must(Bytes(c, 200, "text/csv", body)) })
		g.Handle("GET /json", func(c *loop.Ctx) { must(Bytes(c, 200, "application/json", bytes.Repeat(body, 10))) })
		s.Handle("GET /bin", func(c *loop.Ctx) { must(Bytes(c, 200, "application/octet-stream", bytes.Repeat(body, 10))) })
		s.Handle("GET /csv", func(c *loop.Ctx) { must(Bytes(c, 200, "text/csv", body)) })
	})
	for _, tc := range []struct {
		path  string
		coded bool
	}{
		{"/tuned/bin", true}, {"/tuned/csv", true}, {"/tuned/json", false}, // types replaced, not added to
		{"/bin", false}, {"/csv", false}, // defaults: not a listed type; below 1 KiB
	} {
		resp, raw := get(t, plain, "GET", url+tc.path, "gzip")
		if tc.coded {
			assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"), tc.path)
			assert.Equal(t, body, gunzip(t, raw), tc.path)
		} else {
			assert.Empty(t, resp.Header.Get("Content-Encoding"), tc.path)
		}
	}
}

// TestConfigValidate: invalid fields are refused, naming the field and the value.
func TestConfigValidate(t *testing.T) {
	for _, cfg := range []Config{{}, {Level: 1}, {Level: 9, MinSize: 1}, {Types: []string{"text/*", "*/*", "application/vnd.game+json"}}} {
		assert.NoError(t, cfg.Validate(), "%+v", cfg)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Level: -1}, "compress: Config.Level (-1) must be 0 (default 1) or from 1 (fastest) to 9 (smallest)"},
		{Config{Level: 10}, "compress: Config.Level (10) must be"},
		{Config{MinSize: -5}, "compress: Config.MinSize (-5) must be 0 (default 1024) or a size in bytes"},
		{Config{Types: []string{"text/plain", "json"}}, `compress: Config.Types[1] ("json") is not a media type`},
		{Config{Types: []string{"text/plain; charset=utf-8"}}, `compress: Config.Types[0] ("text/plain; charset=utf-8") is not a media type`},
		{Config{Types: []string{"text/"}}, `Config.Types[0] ("text/") is not a media type`},
		{Config{Types: []string{"*/json"}}, `compress: Config.Types[0] ("*/json"): a wildcard type needs a wildcard subtype (*/*)`},
	} {
		err := tc.cfg.Validate()
		require.Error(t, err, "%+v", tc.cfg)
		assert.Contains(t, err.Error(), tc.want)
		_, err = New(tc.cfg)
		assert.Error(t, err, "New validates")
	}
}

// TestLoopServesWhileCompressing: a 4 MiB body compressed at level 9 does not hold the
// loop. The pool worker compressing it stops after its first chunk until a request on
// another connection has been answered; were the compression on the loop (single-thread
// mode), that request could not be answered and the worker would give up waiting. The
// events are checked in order; no duration is measured.
func TestLoopServesWhileCompressing(t *testing.T) {
	huge := bytes.Repeat([]byte(bigText), 4<<20/len(bigText)+1)[:4<<20]
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			var (
				mu     sync.Mutex
				events []string
			)
			note := func(e string) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}
			started := make(chan struct{})
			fastAnswered := make(chan struct{})
			var once sync.Once
			hookCompressing = func() {
				once.Do(func() {
					note("compressing")
					close(started)
					select {
					case <-fastAnswered:
						note("compression resumed")
					case <-time.After(10 * time.Second): // a bound on a failure, not a timing
						note("the fast request was not answered while the body was compressed")
					}
				})
			}
			t.Cleanup(func() { hookCompressing = nil })
			mw, err := New(Config{Level: 9})
			require.NoError(t, err)
			url := serve(t, mt, func(s *loop.Server) {
				s.Use(mw)
				s.Handle("GET /huge", func(c *loop.Ctx) { must(Bytes(c, 200, "text/plain", huge)) })
				s.Handle("GET /fast", func(c *loop.Ctx) { c.String(200, "fast") })
			})

			hugeDone := make(chan []byte, 1)
			go func() {
				// Not get: require may not stop the test from this goroutine.
				req, _ := http.NewRequest("GET", url+"/huge", nil)
				req.Header.Set("Accept-Encoding", "gzip")
				resp, err := plain.Do(req)
				if err != nil {
					hugeDone <- nil
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				note("huge answered")
				hugeDone <- raw
			}()
			<-started
			_, body := get(t, plain, "GET", url+"/fast") // a connection of its own: the other is busy
			note("fast answered")
			close(fastAnswered)
			raw := <-hugeDone
			require.NotNil(t, raw)
			assert.Equal(t, huge, gunzip(t, raw))
			assert.Equal(t, "fast", string(body))
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, []string{"compressing", "fast answered", "compression resumed", "huge answered"}, events)
		})
	}
}
