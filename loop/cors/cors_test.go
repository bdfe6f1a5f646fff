package cors

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

const page = "https://play.example.com"

// corsServer serves an API with cfg's CORS on a server in the given mode: GET
// /api/items, PUT /api/items/{id}, and OPTIONS on every path. handled counts the
// handler runs.
func corsServer(t *testing.T, mt bool, cfg Config, optionsRoute bool) (url string, handled *atomic.Int64) {
	t.Helper()
	mw, err := New(cfg)
	require.NoError(t, err)
	handled = new(atomic.Int64)
	s := loop.New(looptest.Config(t, loop.Config{MultiThread: mt}))
	s.Use(mw)
	h := func(c *loop.Ctx) {
		handled.Add(1)
		c.SetHeader("X-Request-Id", "r-1")
		c.String(200, "handler "+c.Method())
	}
	s.Handle("GET /api/items", h)
	s.Handle("PUT /api/items/{id}", h)
	if optionsRoute {
		s.Handle("OPTIONS /{path...}", h)
	}
	url = looptest.Start(t, s)
	t.Cleanup(client.CloseIdleConnections) // runs before the server's shutdown
	return url, handled
}

// client keeps its connections until a test's server shuts down.
var client = &http.Client{Timeout: 10 * time.Second}

// do sends method url with the headers given as name, value pairs and returns the
// response with its body read.
func do(t *testing.T, method, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, string(body)
}

// noCORS asserts that h holds no Access-Control-* header.
func noCORS(t *testing.T, h http.Header) {
	t.Helper()
	for k := range h {
		assert.False(t, strings.HasPrefix(k, "Access-Control-"), "unexpected %s: %q", k, h.Values(k))
	}
}

// TestCORSOverTheWire: in both modes, a credentialed configuration with a list of
// origins answers preflights (204 with the right Access-Control-* headers, or 403 naming
// the refusal), decorates the actual responses of allowed origins, leaves other origins'
// responses without CORS headers, and varies every response by Origin.
func TestCORSOverTheWire(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			url, handled := corsServer(t, mt, Config{
				AllowedOrigins:   []string{page, "http://localhost:5173"},
				AllowedMethods:   []string{"PUT", "DELETE"},
				AllowedHeaders:   []string{"X-Token"},
				ExposedHeaders:   []string{"X-Request-Id"},
				AllowCredentials: true,
				MaxAge:           10 * time.Minute,
			}, true)

			// An allowed preflight: answered by the middleware, not the handler.
			resp, body := do(t, "OPTIONS", url+"/api/items/7", "Origin", page,
				"Access-Control-Request-Method", "PUT", "Access-Control-Request-Headers", "x-token,content-type")
			assert.Equal(t, 204, resp.StatusCode)
			assert.Empty(t, body)
			assert.Equal(t, page, resp.Header.Get("Access-Control-Allow-Origin"))
			assert.Equal(t, "true", resp.Header.Get("Access-Control-Allow-Credentials"))
			assert.Equal(t, "GET, HEAD, POST, PUT, DELETE", resp.Header.Get("Access-Control-Allow-Methods"))
			assert.Equal(t, "X-Token, Accept, Accept-Language, Content-Language, Content-Type", resp.Header.Get("Access-Control-Allow-Headers"))
			assert.Equal(t, "600", resp.Header.Get("Access-Control-Max-Age"))
			assert.Equal(t, "Origin, Access-Control-Request-Method, Access-Control-Request-Headers", resp.Header.Get("Vary"))
			assert.Empty(t, resp.Header.Get("Access-Control-Expose-Headers"), "exposing is for actual responses")
			assert.Zero(t, handled.Load())

			// Another allowed origin, a safelisted method and no requested headers.
			resp, _ = do(t, "OPTIONS", url+"/api/items", "Origin", "http://localhost:5173", "Access-Control-Request-Method", "GET")
			assert.Equal(t, 204, resp.StatusCode)
			assert.Equal(t, "http://localhost:5173", resp.Header.Get("Access-Control-Allow-Origin"))

			// Refused preflights: 403 naming why, no CORS header.
			for _, tc := range []struct{ why, origin, method, headers string }{
				{"origin not allowed", "https://evil.example", "PUT", ""},
				{"origin not allowed", page + ".evil.example", "PUT", ""},
				{"origin not allowed", "null", "PUT", ""},
				{"method not allowed", page, "PATCH", ""},
				{"method not allowed", page, "put", ""}, // methods are case-sensitive
				{"request header not allowed", page, "PUT", "x-token, x-admin"},
				{"request header not allowed", page, "PUT", "x-token, bad header"},
			} {
				hdr := []string{"Origin", tc.origin, "Access-Control-Request-Method", tc.method}
				if tc.headers != "" {
					hdr = append(hdr, "Access-Control-Request-Headers", tc.headers)
				}
				resp, body := do(t, "OPTIONS", url+"/api/items/7", hdr...)
				assert.Equal(t, 403, resp.StatusCode, "%+v", tc)
				assert.Equal(t, "cors: "+tc.why+"\n", body, "%+v", tc)
				noCORS(t, resp.Header)
				assert.Contains(t, resp.Header.Get("Vary"), "Origin")
			}
			assert.Zero(t, handled.Load())

			// An OPTIONS that is not a preflight reaches the handler.
			resp, body = do(t, "OPTIONS", url+"/api/items", "Origin", page)
			assert.Equal(t, "handler OPTIONS", body)
			assert.Equal(t, page, resp.Header.Get("Access-Control-Allow-Origin"))
			resp, body = do(t, "OPTIONS", url+"/api/items")
			assert.Equal(t, "handler OPTIONS", body)
			noCORS(t, resp.Header)

			// Actual requests: decorated for an allowed origin, not for another, varied by
			// Origin in every case; the handler runs in all.
			resp, body = do(t, "GET", url+"/api/items", "Origin", page)
			assert.Equal(t, "handler GET", body)
			assert.Equal(t, page, resp.Header.Get("Access-Control-Allow-Origin"))
			assert.Equal(t, "true", resp.Header.Get("Access-Control-Allow-Credentials"))
			assert.Equal(t, "X-Request-Id", resp.Header.Get("Access-Control-Expose-Headers"))
			assert.Equal(t, []string{"Origin"}, resp.Header.Values("Vary"))
			resp, _ = do(t, "PUT", url+"/api/items/7", "Origin", "HTTPS://Play.Example.com")
			assert.Equal(t, page, resp.Header.Get("Access-Control-Allow-Origin"), "origins compare without case")
			resp, body = do(t, "GET", url+"/api/items", "Origin", "https://evil.example")
			assert.Equal(t, "handler GET", body)
			noCORS(t, resp.Header)
			assert.Equal(t, []string{"Origin"}, resp.Header.Values("Vary"))
			resp, _ = do(t, "GET", url+"/api/items")
			noCORS(t, resp.Header)
			assert.Equal(t, []string{"Origin"}, resp.Header.Values("Vary"))
			assert.EqualValues(t, 6, handled.Load()) // two OPTIONS, four actual requests
		})
	}
}

// TestCORSWildcards: "*" origins without credentials answer "*" and do not vary by
// Origin; "*" methods and headers echo what the preflight asked for; "*" exposes all.
func TestCORSWildcards(t *testing.T) {
	url, _ := corsServer(t, false, Config{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"*"},
		AllowedHeaders: []string{"*"}, ExposedHeaders: []string{"*"}}, true)
	resp, _ := do(t, "OPTIONS", url+"/api/items", "Origin", "https://any.example",
		"Access-Control-Request-Method", "PURGE", "Access-Control-Request-Headers", "x-a, x-b")
	assert.Equal(t, 204, resp.StatusCode)
	assert.Equal(t, "*", resp.Header.Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "PURGE", resp.Header.Get("Access-Control-Allow-Methods"))
	assert.Equal(t, "x-a, x-b", resp.Header.Get("Access-Control-Allow-Headers"))
	assert.Empty(t, resp.Header.Get("Access-Control-Allow-Credentials"))
	assert.Empty(t, resp.Header.Get("Access-Control-Max-Age"))

	resp, _ = do(t, "OPTIONS", url+"/api/items", "Origin", "https://any.example",
		"Access-Control-Request-Method", "PURGE", "Access-Control-Request-Headers", "x-a, {x-b}")
	assert.Equal(t, 403, resp.StatusCode, "a requested name that is not a token is not echoed")

	resp, _ = do(t, "GET", url+"/api/items", "Origin", "https://any.example")
	assert.Equal(t, "*", resp.Header.Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "*", resp.Header.Get("Access-Control-Expose-Headers"))
	assert.Empty(t, resp.Header.Values("Vary"))
}

// TestPreflightNeedsAnOptionsRoute shows why the package comment asks for an OPTIONS
// route: without one a preflight never reaches the middleware, and the router's 405 has
// no CORS header.
func TestPreflightNeedsAnOptionsRoute(t *testing.T) {
	url, handled := corsServer(t, false, Config{AllowedOrigins: []string{page}}, false)
	resp, _ := do(t, "OPTIONS", url+"/api/items", "Origin", page, "Access-Control-Request-Method", "GET")
	assert.Equal(t, 405, resp.StatusCode)
	noCORS(t, resp.Header)
	assert.Zero(t, handled.Load())
}

// TestConfigValidate: each invalid configuration is refused by Validate and New, with an
// error naming the field and its value.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.AllowedOrigins is empty"},
		{Config{AllowedOrigins: []string{"*"}, AllowCredentials: true}, `Config.AllowedOrigins[0] ("*") with Config.AllowCredentials (true)`},
		{Config{AllowedOrigins: []string{page, "*"}}, `Config.AllowedOrigins[1] ("*") must be the only entry`},
		{Config{AllowedOrigins: []string{page + "/"}}, `Config.AllowedOrigins[0] ("https://play.example.com/") has a path`},
		{Config{AllowedOrigins: []string{page + "/app"}}, `Config.AllowedOrigins[0] ("https://play.example.com/app") has a path`},
		{Config{AllowedOrigins: []string{"play.example.com"}}, `Config.AllowedOrigins[0] ("play.example.com") is not an origin`},
		{Config{AllowedOrigins: []string{"https://play.example.com:443"}}, `write https://play.example.com`},
		{Config{AllowedOrigins: []string{"http://u:p@a.example"}}, `has user information`},
		{Config{AllowedOrigins: []string{page}, AllowedMethods: []string{"GET", "BAD METHOD"}}, `Config.AllowedMethods[1] ("BAD METHOD")`},
		{Config{AllowedOrigins: []string{page}, AllowedHeaders: []string{"X-Ok", "X:Bad"}}, `Config.AllowedHeaders[1] ("X:Bad")`},
		{Config{AllowedOrigins: []string{page}, ExposedHeaders: []string{""}}, `Config.ExposedHeaders[0] ("")`},
		{Config{AllowedOrigins: []string{page}, ExposedHeaders: []string{"*"}, AllowCredentials: true}, `Config.ExposedHeaders[0] ("*") with Config.AllowCredentials (true)`},
		{Config{AllowedOrigins: []string{page}, MaxAge: -time.Second}, "Config.MaxAge (-1s)"},
		{Config{AllowedOrigins: []string{page}, MaxAge: time.Millisecond}, "Config.MaxAge (1ms)"},
	} {
		err := tc.cfg.Validate()
		if assert.Error(t, err, "%+v", tc.cfg) {
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "cors: Config."), err.Error())
		}
		_, err = New(tc.cfg)
		assert.Error(t, err)
	}
	assert.NoError(t, Config{AllowedOrigins: []string{page, "http://localhost:8080", "app://game"}, AllowedMethods: []string{"*"},
		AllowedHeaders: []string{"*"}, ExposedHeaders: []string{"X-Request-Id"}, AllowCredentials: true, MaxAge: time.Hour}.Validate())
}

// FuzzHeadersAllowed: whatever a preflight's Access-Control-Request-Headers holds, the
// check does not panic; with "*" headers an accepted value is a valid header value (it is
// echoed), and with a list every name it accepts is on the list or safelisted.
func FuzzHeadersAllowed(f *testing.F) {
	for _, s := range []string{"", "x-token", "x-token, content-type", " ,\t,", "x-a,,x-b", "bad header", "x\x00", "X-TOKEN", "caf\xc3\xa9"} {
		f.Add(s)
	}
	any := newPolicy(Config{AllowedOrigins: []string{"*"}, AllowedHeaders: []string{"*"}})
	list := newPolicy(Config{AllowedOrigins: []string{page}, AllowedHeaders: []string{"X-Token"}})
	f.Fuzz(func(t *testing.T, s string) {
		if any.headersAllowed(s) && s != "" && !httpcodec.ValidHeaderValue([]byte(s)) {
			t.Fatalf("accepted %q for echoing, not a valid header value", s)
		}
		if list.headersAllowed(s) {
			for _, n := range strings.Split(s, ",") {
				n = strings.ToLower(strings.Trim(n, " \t"))
				if n != "" && n != "x-token" && n != "accept" && n != "accept-language" && n != "content-language" && n != "content-type" {
					t.Fatalf("accepted %q with the name %q", s, n)
				}
			}
		}
	})
}

// FuzzOrigin: Validate never panics on an origin, and an origin it accepts is a valid
// header value once lower-cased (it is sent back) and is allowed when a browser sends it.
func FuzzOrigin(f *testing.F) {
	for _, s := range []string{page, "http://localhost:5173", "https://a.example:443", "*", "null", "https://a/b", "http://[::1]:8080", "https://a.example\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, o string) {
		cfg := Config{AllowedOrigins: []string{o}}
		if cfg.Validate() != nil || o == "*" {
			return
		}
		p := newPolicy(cfg)
		v, ok := p.allowOrigin(strings.ToLower(o))
		if !ok || !httpcodec.ValidHeaderValue([]byte(v)) {
			t.Fatalf("origin %q accepted by Validate: allowed %v, value %q", o, ok, v)
		}
	})
}

func BenchmarkHeadersAllowed(b *testing.B) {
	p := newPolicy(Config{AllowedOrigins: []string{page}, AllowedHeaders: []string{"X-Token", "Authorization"}})
	b.ReportAllocs()
	for b.Loop() {
		if !p.headersAllowed("authorization, content-type, x-token") {
			b.Fatal("refused")
		}
	}
}

// BenchmarkRoundTrip is a keep-alive request's round trip over loopback: a plain GET
// without the middleware, an actual CORS GET, and a preflight. The client reads the
// response raw into a reused buffer, so allocs/op are the server's.
func BenchmarkRoundTrip(b *testing.B) {
	for _, tc := range []struct {
		name, req string
		mw        bool
		status    string
		body      int
	}{
		{"plain", "GET /api HTTP/1.1\r\nHost: x\r\nOrigin: " + page + "\r\n\r\n", false, "HTTP/1.1 200", 2},
		{"actual", "GET /api HTTP/1.1\r\nHost: x\r\nOrigin: " + page + "\r\n\r\n", true, "HTTP/1.1 200", 2},
		{"preflight", "OPTIONS /api HTTP/1.1\r\nHost: x\r\nOrigin: " + page + "\r\nAccess-Control-Request-Method: PUT\r\nAccess-Control-Request-Headers: x-token, content-type\r\n\r\n", true, "HTTP/1.1 204", 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := loop.New(looptest.Config(b, loop.Config{}))
			if tc.mw {
				mw, err := New(Config{AllowedOrigins: []string{page}, AllowedMethods: []string{"PUT"}, AllowedHeaders: []string{"X-Token"}, MaxAge: time.Hour})
				require.NoError(b, err)
				s.Use(mw)
			}
			s.Handle("GET /api", func(c *loop.Ctx) { c.String(200, "ok") })
			s.Handle("OPTIONS /{path...}", func(c *loop.Ctx) { c.Bytes(204, "", nil) })
			url := looptest.Start(b, s)
			cn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			require.NoError(b, err)
			defer cn.Close()
			req, buf := []byte(tc.req), make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cn.Write(req); err != nil {
					b.Fatal(err)
				}
				readResponse(b, cn, buf, tc.status, tc.body)
			}
		})
	}
}

// readResponse reads one response into buf: a head starting with status, then body bytes.
func readResponse(b *testing.B, cn net.Conn, buf []byte, status string, body int) {
	n := 0
	for {
		m, err := cn.Read(buf[n:])
		if err != nil {
			b.Fatal(err)
		}
		n += m
		if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 && n >= i+4+body {
			if !bytes.HasPrefix(buf, []byte(status)) {
				b.Fatalf("%q", buf[:n])
			}
			return
		}
	}
}
