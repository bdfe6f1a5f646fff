package loop

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/batonrt/baton/accounting"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTrustedProxiesNameTheClient: behind a trusted proxy (the test's own loopback address)
// the client is the first address from the right of Forwarded or X-Forwarded-For that is
// not a trusted proxy, in RemoteAddr and in the access-log record; a client's forged
// prefix cannot get past the proxy's own append; without TrustedProxies, or from a peer
// that is not trusted, the headers are ignored. Over real sockets.
func TestTrustedProxiesNameTheClient(t *testing.T) {
	serve := func(t *testing.T, trusted []netip.Prefix) (string, <-chan accounting.RequestRecord) {
		sink, recs := recordSink()
		_, addr := startServer(t, Config{TrustedProxies: trusted, OnRequestDone: sink}, func(s *Server) {
			s.Handle("GET /who", func(c *Ctx) {
				host, _, err := net.SplitHostPort(c.RemoteAddr().String())
				require.NoError(t, err)
				c.String(200, host)
			})
		})
		return addr, recs
	}
	who := func(t *testing.T, addr string, headers ...string) string {
		c := dial(t, addr)
		c.send("GET /who HTTP/1.1\r\nHost: t\r\n" + strings.Join(headers, "") + "\r\n")
		resp, body := c.read("GET")
		require.Equal(t, 200, resp.StatusCode, body)
		return body
	}
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

	t.Run("trusted", func(t *testing.T) {
		addr, recs := serve(t, loopback)
		assert.Equal(t, "203.0.113.7", who(t, addr, "X-Forwarded-For: 203.0.113.7\r\n"))
		assert.Contains(t, nextRecord(t, recs).Remote.String(), "203.0.113.7", "the access log names the client")
		// A client that forges a prefix: the proxy appended the address it saw last.
		assert.Equal(t, "198.51.100.9", who(t, addr, "X-Forwarded-For: 6.6.6.6, 198.51.100.9\r\n"))
		<-recs
		// A chain of trusted proxies is skipped.
		assert.Equal(t, "198.51.100.9", who(t, addr, "X-Forwarded-For: 198.51.100.9, 127.0.0.2, 127.0.0.3\r\n"))
		<-recs
		// Forwarded (RFC 7239) wins over X-Forwarded-For, IPv6 and ports included.
		assert.Equal(t, "2001:db8:cafe::17", who(t, addr, `Forwarded: for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https`+"\r\n", "X-Forwarded-For: 192.0.2.1\r\n"))
		<-recs
		// Nothing to go by: the peer.
		assert.Equal(t, "127.0.0.1", who(t, addr))
		<-recs
		// A hop that does not parse stops the walk: the peer stays the client.
		assert.Equal(t, "127.0.0.1", who(t, addr, "X-Forwarded-For: 203.0.113.7, unknown\r\n"))
	})
	t.Run("untrusted", func(t *testing.T) {
		addr, _ := serve(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
		assert.Equal(t, "127.0.0.1", who(t, addr, "X-Forwarded-For: 203.0.113.7\r\n"), "a peer that is not trusted is the client")
	})
	t.Run("none", func(t *testing.T) {
		addr, _ := serve(t, nil)
		assert.Equal(t, "127.0.0.1", who(t, addr, "X-Forwarded-For: 203.0.113.7\r\n", "Forwarded: for=203.0.113.8\r\n"))
	})
}

// TestTrustedProxiesFromEnv reads BATON_TRUSTED_PROXIES: prefixes and bare addresses, and
// names a bad entry.
func TestTrustedProxiesFromEnv(t *testing.T) {
	env := map[string]string{"BATON_TRUSTED_PROXIES": "10.0.0.0/8, 127.0.0.1,::1"}
	cfg, err := fromLookup(Config{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}, cfg.TrustedProxies)
	env["BATON_TRUSTED_PROXIES"] = "10.0.0.0/8,nginx"
	_, err = fromLookup(Config{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.Error(t, err)
	assert.Contains(t, err.Error(), `BATON_TRUSTED_PROXIES`)
	assert.Contains(t, err.Error(), `"nginx" is neither an address nor a CIDR prefix`)
}
