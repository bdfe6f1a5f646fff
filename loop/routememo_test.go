package loop

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRouteMemoAnswersAsTheRouter: requests that repeat, alternate and differ only by
// method (also of the same length), query or parameters get the route (and parameters) the router gives them, with
// the memo in front of it.
func TestRouteMemoAnswersAsTheRouter(t *testing.T) {
	r := newChainRig(t, Config{}, func(s *Server) {
		for _, p := range []string{"GET /a", "POST /a", "GET /p/{id}", "GET /", "PUT /c", "GET /c"} {
			s.Handle(p, func(c *Ctx) { c.String(200, c.Route()+"|"+c.PathValue("id")) })
		}
	})
	type exch struct {
		req, want string
		status    int
	}
	reqs := []exch{
		{"GET /a", "GET /a|", 200}, {"GET /a", "GET /a|", 200}, {"HEAD /a", "", 200}, {"HEAD /a", "", 200},
		{"GET /p/1", "GET /p/{id}|1", 200}, {"GET /p/2", "GET /p/{id}|2", 200}, {"GET /a", "GET /a|", 200},
		{"POST /a", "POST /a|", 200}, {"GET /b", "Not Found\n", 404}, {"GET /a?x=1", "GET /a|", 200},
		{"PUT /a", "Method Not Allowed\n", 405}, {"GET /b", "Not Found\n", 404}, {"GET /p/3", "GET /p/{id}|3", 200},
		{"GET /a", "GET /a|", 200},
		// Another method than GET remembered (compared byte by byte), then GET with a
		// method of the same length (compared with the constant).
		{"PUT /c", "PUT /c|", 200}, {"PUT /c", "PUT /c|", 200}, {"GET /c", "GET /c|", 200},
		{"PUT /c", "PUT /c|", 200}, {"GET /c", "GET /c|", 200},
	}
	// A response to HEAD has a length but no body: split the output there.
	var in strings.Builder
	for _, x := range reqs {
		in.WriteString(x.req + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	}
	r.read(in.String())
	out := r.fc.out.String()
	heads := strings.Count(out, "HTTP/1.1 ")
	require.Equal(t, len(reqs), heads)
	parts := strings.SplitAfter(out, "Content-Length: 7\r\n\r\n") // GET /a|'s head, then HEAD's two
	require.Greater(t, len(parts), 4)
	r.fc.out.Reset()
	r.fc.out.WriteString(strings.Join(parts[4:], "")) // from the first GET /p/1
	resps := r.responses(t)
	require.Len(t, resps, len(reqs)-4)
	for i, x := range reqs[4:] {
		assert.Equal(t, x.status, resps[i].StatusCode, "%s", x.req)
		assert.Equal(t, x.want, bodyOf(t, resps[i]), "%s", x.req)
	}
	assert.Equal(t, 4, strings.Count(strings.Join(parts[:4], ""), "Content-Length: 7\r\n\r\n"), "GET /a twice, HEAD /a twice with GET's length")
	assert.Equal(t, "GET", string(r.s.routes.key[:r.s.routes.methodN]), "the memo holds the last parameterless match")
}
