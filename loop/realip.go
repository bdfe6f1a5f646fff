package loop

import (
	"net"
	"net/netip"
	"strings"
)

// The client's address behind a proxy. With Config.TrustedProxies set, a request whose peer
// is one of the trusted proxies has its client address taken from the headers the proxy
// added: RFC 7239's Forwarded (its for= parameters) when present, else X-Forwarded-For.
// The list is read from the right (the hop nearest the server) and the first address that
// is not a trusted proxy is the client: a client can prepend what it likes to the header,
// but it cannot get past the proxy's own append. A peer that is not trusted is the client
// whatever its headers say.

// trustedSet is the parsed Config.TrustedProxies. Immutable after New.
type trustedSet []netip.Prefix

func (t trustedSet) contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// resolveClient sets c's client address from its proxy's headers when its peer is a
// trusted proxy. Loop-confined (routeRequest, before the handler runs).
func (s *Server) resolveClient(c *Ctx) {
	peer, ok := addrOf(c.remote)
	if !ok || !s.trusted.contains(peer) {
		return
	}
	var hops []string
	if v, ok := c.req.Get("Forwarded"); ok {
		hops = forwardedFor(string(v))
	} else if v, ok := c.req.Get("X-Forwarded-For"); ok {
		for _, h := range strings.Split(string(v), ",") {
			hops = append(hops, strings.TrimSpace(h))
		}
	}
	var client netip.Addr
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			return // a hop that does not parse: trust nothing further left of it
		}
		client = a
		if !s.trusted.contains(a) {
			break
		}
	}
	if client.IsValid() {
		c.remote = &net.TCPAddr{IP: client.AsSlice(), Zone: client.Zone()}
	}
}

// addrOf returns a net.Addr's IP.
func addrOf(a net.Addr) (netip.Addr, bool) {
	switch v := a.(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	case nil:
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap(), err == nil
}

// forwardedFor returns the for= values of a Forwarded header, in order (RFC 7239: elements
// separated by commas, pairs by semicolons, values optionally quoted).
func forwardedFor(v string) []string {
	var out []string
	for _, elem := range strings.Split(v, ",") {
		for _, pair := range strings.Split(elem, ";") {
			k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
				out = append(out, strings.Trim(strings.TrimSpace(val), `"`))
			}
		}
	}
	return out
}

// parseHop reads one hop: an IP, an IP with a port, or a bracketed IPv6 with or without a
// port. Obfuscated identifiers ("_hidden", "unknown") do not parse.
func parseHop(h string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(h); err == nil {
		return ap.Addr().Unmap(), true
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	a, err := netip.ParseAddr(h)
	return a.Unmap(), err == nil
}
