package requestid

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/internal/httpcodec"
	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/offload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// generated matches a generated id: the 12-digit base-32 prefix, '-', a base-36 count.
var generated = regexp.MustCompile(`^[0-9a-v]{12}-[0-9a-z]{1,13}$`)

// seen is what a handler saw of its request's id, in each place it can be read.
type seen struct{ get, ctx, offloaded string }

// startIDServer serves GET /id, which reports its id as Get, FromContext(c.Context()) and
// FromContext in an offloaded function see it, on a server of shards loops.
func startIDServer(t *testing.T, mt bool, shards int, cfg Config) string {
	t.Helper()
	mw, err := New(cfg)
	require.NoError(t, err)
	s := loop.New(looptest.Config(t, loop.Config{MultiThread: mt, Shards: shards}))
	s.Use(mw)
	s.Handle("GET /id", func(c *loop.Ctx) {
		v := seen{get: Get(c), ctx: FromContext(c.Context())}
		_, err := offload.Do(c, func(ctx context.Context) (struct{}, error) {
			v.offloaded = FromContext(ctx)
			return struct{}{}, nil
		})
		if err != nil {
			c.String(500, err.Error())
			return
		}
		c.String(200, v.get+" "+v.ctx+" "+v.offloaded)
	})
	url := looptest.Start(t, s)
	t.Cleanup(client.CloseIdleConnections) // runs before the server's shutdown
	return url
}

// client keeps its connections until a test's server shuts down.
var client = &http.Client{Timeout: 10 * time.Second}

// get requests url with the header name: value (none when name is ""), and returns the
// response's id header and the handler's report.
func get(t *testing.T, url, name, value, respHeader string) (string, seen) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	if name != "" {
		req.Header[name] = []string{value} // as given: net/http would not send some forged values otherwise
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 200, resp.StatusCode, string(body))
	f := strings.Split(string(body), " ")
	require.Len(t, f, 3, string(body))
	return resp.Header.Get(respHeader), seen{f[0], f[1], f[2]}
}

// TestRequestIDOverTheWire: in both modes, a request without an id gets a generated one;
// a well-formed incoming id is kept; forged ones (too long, spaces, quotes, markup,
// non-ASCII, empty) are replaced. In every case the response header, Get, the request's
// context and an offloaded function's context agree.
func TestRequestIDOverTheWire(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			url := startIDServer(t, mt, 1, Config{}) + "/id"
			check := func(value string, sent bool) string {
				t.Helper()
				name := ""
				if sent {
					name = DefaultHeader
				}
				id, v := get(t, url, name, value, DefaultHeader)
				assert.Equal(t, seen{id, id, id}, v, "incoming %q", value)
				return id
			}

			a, b := check("", false), check("", false)
			assert.Regexp(t, generated, a)
			assert.Regexp(t, generated, b)
			assert.NotEqual(t, a, b)

			for _, ok := range []string{"abc-123", "0f8fad5b-d9cb-469f-a165-70867728950e",
				"Root=1-5759e988-bd862e3fe1be46a994272793", strings.Repeat("x", DefaultMaxLen), "a_b.c:d+e/f=g@h"} {
				assert.Equal(t, ok, check(ok, true))
			}
			for _, forged := range []string{strings.Repeat("x", DefaultMaxLen+1), "a b", `a"b`, "<script>", "id;drop",
				"caf\xc3\xa9", "a\tb", `level=ERROR msg="x"`, "{\"a\":1}"} {
				assert.Regexp(t, generated, check(forged, true), "forged %q", forged)
			}
		})
	}
}

// TestRequestIDConfig: a header of the application's choice, and IgnoreIncoming, which
// replaces even a well-formed incoming id.
func TestRequestIDConfig(t *testing.T) {
	url := startIDServer(t, false, 1, Config{Header: "X-Correlation-Id", MaxLen: 8}) + "/id"
	id, v := get(t, url, "X-Correlation-Id", "short", "X-Correlation-Id")
	assert.Equal(t, "short", id)
	assert.Equal(t, seen{id, id, id}, v)
	id, _ = get(t, url, "X-Correlation-Id", "toolong99", "X-Correlation-Id")
	assert.Regexp(t, generated, id, "MaxLen 8")
	id, _ = get(t, url, DefaultHeader, "short", "X-Correlation-Id")
	assert.Regexp(t, generated, id, "X-Request-Id is not read when Header is set")

	url = startIDServer(t, false, 1, Config{IgnoreIncoming: true}) + "/id"
	id, v = get(t, url, DefaultHeader, "abc-123", DefaultHeader)
	assert.Regexp(t, generated, id)
	assert.Equal(t, seen{id, id, id}, v)
}

// TestRequestIDsUnique: concurrent requests over several connections to a server of two
// loops, in both modes, get distinct ids, each the same in the header and the handler.
func TestRequestIDsUnique(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			url := startIDServer(t, mt, 2, Config{}) + "/id"
			const clients, each = 8, 25
			var mu sync.Mutex
			ids := map[string]bool{}
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for range each {
						id, v := get(t, url, "", "", DefaultHeader)
						assert.Equal(t, seen{id, id, id}, v)
						mu.Lock()
						ids[id] = true
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			assert.Len(t, ids, clients*each)
		})
	}
}

// TestConfigValidate: each invalid field is named with its value, and New refuses it.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Header: "X Request Id"}, `Config.Header ("X Request Id")`},
		{Config{Header: "X-Id\r\nSet-Cookie: a=b"}, `Config.Header ("X-Id\r\nSet-Cookie: a=b")`},
		{Config{MaxLen: -1}, "Config.MaxLen (-1)"},
		{Config{MaxLen: 257}, "Config.MaxLen (257)"},
	} {
		err := tc.cfg.Validate()
		require.Error(t, err, "%+v", tc.cfg)
		assert.Contains(t, err.Error(), tc.want)
		_, err = New(tc.cfg)
		assert.Error(t, err)
	}
	assert.NoError(t, Config{Header: "X-Trace", MaxLen: 256, IgnoreIncoming: true}.Validate())
}

// TestGenerateDistinct: ids generated from several goroutines at once are distinct and
// well-formed (the counter is the only shared state).
func TestGenerateDistinct(t *testing.T) {
	const gs, each = 4, 1000
	out := make([][]string, gs)
	var wg sync.WaitGroup
	for g := range gs {
		wg.Go(func() {
			for range each {
				b := &box{}
				b.generate()
				out[g] = append(out[g], b.id)
			}
		})
	}
	wg.Wait()
	all := map[string]bool{}
	for _, ids := range out {
		for _, id := range ids {
			require.Regexp(t, generated, id)
			all[id] = true
		}
	}
	assert.Len(t, all, gs*each)
}

// FuzzValidID: an id validID accepts is within the length bound, made of the allowed
// bytes only (checked against a regular expression written apart) and a valid header
// value, so the middleware's SetHeader cannot panic on it nor carry an injection.
func FuzzValidID(f *testing.F) {
	for _, s := range []string{"", "abc-123", "a b", "a\r\nb", "\x00", "caf\xc3\xa9", strings.Repeat("z", 70), "Root=1-a;b"} {
		f.Add(s)
	}
	ref := regexp.MustCompile(`^[A-Za-z0-9_.:+/=@-]{1,64}$`)
	f.Fuzz(func(t *testing.T, s string) {
		ok := validID(s, DefaultMaxLen)
		if ok != ref.MatchString(s) {
			t.Fatalf("validID(%q) = %v, the reference says %v", s, ok, !ok)
		}
		if ok && !httpcodec.ValidHeaderValue([]byte(s)) {
			t.Fatalf("validID accepted %q, not a valid header value", s)
		}
	})
}

func BenchmarkGenerate(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		bx := &box{}
		bx.generate()
	}
}

func BenchmarkValidID(b *testing.B) {
	id := "0f8fad5b-d9cb-469f-a165-70867728950e"
	b.ReportAllocs()
	for b.Loop() {
		if !validID(id, DefaultMaxLen) {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkRoundTrip is a keep-alive request's round trip over loopback to a route with
// the middleware (generating) and, for comparison, without. The client reads the response
// raw into a reused buffer, so allocs/op are the server's.
func BenchmarkRoundTrip(b *testing.B) {
	for _, with := range []bool{false, true} {
		b.Run(fmt.Sprintf("middleware=%v", with), func(b *testing.B) {
			s := loop.New(looptest.Config(b, loop.Config{}))
			if with {
				mw, err := New(Config{})
				require.NoError(b, err)
				s.Use(mw)
			}
			s.Handle("GET /x", func(c *loop.Ctx) { c.String(200, "ok") })
			url := looptest.Start(b, s)
			cn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			require.NoError(b, err)
			defer cn.Close()
			req := []byte("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
			buf := make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cn.Write(req); err != nil {
					b.Fatal(err)
				}
				readResponse(b, cn, buf)
			}
		})
	}
}

// readResponse reads one response to a GET whose body is "ok" (the head ends with
// "\r\n\r\n", the body is the 2 bytes after it) into buf.
func readResponse(b *testing.B, cn net.Conn, buf []byte) {
	n := 0
	for {
		m, err := cn.Read(buf[n:])
		if err != nil {
			b.Fatal(err)
		}
		n += m
		if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 && n >= i+4+2 {
			if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200")) {
				b.Fatalf("%q", buf[:n])
			}
			return
		}
	}
}
