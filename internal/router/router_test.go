package router

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
)

// testPatterns is the fixed route set used by the table tests and the fuzz
// target. Each handler is its own pattern string.
var testPatterns = []string{
	"GET /",
	"GET /users",
	"POST /users",
	"GET /users/{id}",
	"PUT /users/{id}",
	"DELETE /users/{id}",
	"GET /users/me",
	"GET /users/{id}/posts/{post}",
	"GET /static/{path...}",
	"/any/{x}",
	"GET /any/{x}",
	"/a/{x}/c",
	"/a/b/d",
	"GET /files/{rest...}",
	"GET /files/special",
	"HEAD /h",
	"GET /h",
	"GET /g",
	"POST /p/{x}",
	"GET /p/q",
	"/trail/",
	"GET /x//y",
	"GET /m/{a}/{b}",
	"POST /m/{b}/{a}",
	"/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}",
	"GET /{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}/{j}",
	"GET /w/{first}/{rest...}",
}

func newTestRouter(tb testing.TB) *Router[string] {
	tb.Helper()
	var r Router[string]
	for _, p := range testPatterns {
		if err := r.Add(p, p); err != nil {
			tb.Fatalf("Add(%q): %v", p, err)
		}
	}
	return &r
}

type lookupCase struct {
	method, path string
	res          Result
	pattern      string            // expected pattern (and handler) on Found
	params       map[string]string // expected params on Found (nil = none)
	allow        string            // expected Allow on MethodNotAllowed
}

var lookupCases = []lookupCase{
	// static
	{"GET", "/", Found, "GET /", nil, ""},
	{"GET", "/users", Found, "GET /users", nil, ""},
	{"POST", "/users", Found, "POST /users", nil, ""},
	{"GET", "/h", Found, "GET /h", nil, ""},
	{"GET", "/x//y", Found, "GET /x//y", nil, ""},
	// params
	{"GET", "/users/42", Found, "GET /users/{id}", map[string]string{"id": "42"}, ""},
	{"PUT", "/users/42", Found, "PUT /users/{id}", map[string]string{"id": "42"}, ""},
	{"GET", "/users/a%2Fb", Found, "GET /users/{id}", map[string]string{"id": "a%2Fb"}, ""},
	{"GET", "/users/7/posts/99", Found, "GET /users/{id}/posts/{post}", map[string]string{"id": "7", "post": "99"}, ""},
	// each route keeps its own names at the same position
	{"GET", "/m/1/2", Found, "GET /m/{a}/{b}", map[string]string{"a": "1", "b": "2"}, ""},
	{"POST", "/m/1/2", Found, "POST /m/{b}/{a}", map[string]string{"b": "1", "a": "2"}, ""},
	// eight and ten params
	{"DELETE", "/1/2/3/4/5/6/7/8", Found, "/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}",
		map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7", "h": "8"}, ""},
	{"GET", "/1/2/3/4/5/6/7/8/9/10", Found, "GET /{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}/{j}",
		map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7", "h": "8", "i": "9", "j": "10"}, ""},
	// wildcard rest
	{"GET", "/static/", Found, "GET /static/{path...}", map[string]string{"path": ""}, ""},
	{"GET", "/static/app.js", Found, "GET /static/{path...}", map[string]string{"path": "app.js"}, ""},
	{"GET", "/static/css/a/b.css", Found, "GET /static/{path...}", map[string]string{"path": "css/a/b.css"}, ""},
	{"GET", "/static//x/", Found, "GET /static/{path...}", map[string]string{"path": "/x/"}, ""},
	{"GET", "/files/", Found, "GET /files/{rest...}", map[string]string{"rest": ""}, ""},
	{"GET", "/w/zzz/", Found, "GET /w/{first}/{rest...}", map[string]string{"first": "zzz", "rest": ""}, ""},
	{"GET", "/w/zzz/a/b", Found, "GET /w/{first}/{rest...}", map[string]string{"first": "zzz", "rest": "a/b"}, ""},
	{"GET", "/w/zzz", NotFound, "", nil, ""}, // no segment left for {rest...}
	{"GET", "/w//a", NotFound, "", nil, ""},  // {first} needs a non-empty segment
	// precedence: static > param > rest
	{"GET", "/users/me", Found, "GET /users/me", nil, ""},
	{"GET", "/files/special", Found, "GET /files/special", nil, ""},
	{"GET", "/files/special/x", Found, "GET /files/{rest...}", map[string]string{"rest": "special/x"}, ""},
	{"GET", "/static", NotFound, "", nil, ""}, // no segment left for {path...}
	// backtracking
	{"GET", "/a/b/c", Found, "/a/{x}/c", map[string]string{"x": "b"}, ""},
	{"GET", "/a/b/d", Found, "/a/b/d", nil, ""},
	{"GET", "/a/z/c", Found, "/a/{x}/c", map[string]string{"x": "z"}, ""},
	{"POST", "/p/q", Found, "POST /p/{x}", map[string]string{"x": "q"}, ""}, // static GET /p/q does not serve POST
	// methodless routes; explicit methods win for the same shape
	{"DELETE", "/any/1", Found, "/any/{x}", map[string]string{"x": "1"}, ""},
	{"BREW", "/a/b/d", Found, "/a/b/d", nil, ""},
	{"GET", "/any/1", Found, "GET /any/{x}", map[string]string{"x": "1"}, ""},
	{"HEAD", "/any/1", Found, "GET /any/{x}", map[string]string{"x": "1"}, ""},
	{"GET", "/trail/", Found, "/trail/", nil, ""},
	// HEAD → GET fallback
	{"HEAD", "/h", Found, "HEAD /h", nil, ""},
	{"HEAD", "/g", Found, "GET /g", nil, ""},
	{"HEAD", "/users/7", Found, "GET /users/{id}", map[string]string{"id": "7"}, ""},
	{"HEAD", "/static/x", Found, "GET /static/{path...}", map[string]string{"path": "x"}, ""},
	// 405 with exact Allow
	{"POST", "/users/7", MethodNotAllowed, "", nil, "DELETE, GET, HEAD, PUT"},
	{"PUT", "/users", MethodNotAllowed, "", nil, "GET, HEAD, POST"},
	{"get", "/users", MethodNotAllowed, "", nil, "GET, HEAD, POST"}, // methods are case-sensitive
	{"POST", "/h", MethodNotAllowed, "", nil, "GET, HEAD"},
	{"GET", "/p/z", MethodNotAllowed, "", nil, "POST"},
	{"PUT", "/p/q", MethodNotAllowed, "", nil, "GET, HEAD, POST"}, // union over matching shapes
	{"POST", "/static/x", MethodNotAllowed, "", nil, "GET, HEAD"},
	{"PUT", "/m/1/2", MethodNotAllowed, "", nil, "GET, HEAD, POST"},
	// 404
	{"GET", "/nope", NotFound, "", nil, ""},
	{"GET", "", NotFound, "", nil, ""},
	{"GET", "users", NotFound, "", nil, ""},
	{"GET", "*", NotFound, "", nil, ""},
	{"GET", "/users/", NotFound, "", nil, ""}, // {id} needs a non-empty segment
	{"GET", "/users/1/posts", NotFound, "", nil, ""},
	{"GET", "/users//posts/1", NotFound, "", nil, ""},
	{"GET", "/trail", NotFound, "", nil, ""},
	{"GET", "//y", NotFound, "", nil, ""},
	{"GET", "/x/y", NotFound, "", nil, ""},
	{"GET", "/any/", NotFound, "", nil, ""},
	{"GET", "/1/2/3/4/5/6/7", NotFound, "", nil, ""},
	{"GET", "/1/2/3/4/5/6/7/8/9", NotFound, "", nil, ""},
}

func paramsMap(ps *Params) map[string]string {
	if ps.Len() == 0 {
		return nil
	}
	m := map[string]string{}
	for i := 0; i < ps.Len(); i++ {
		m[ps.Name(i)] = ps.Value(i)
	}
	return m
}

func TestLookup(t *testing.T) {
	r := newTestRouter(t)
	var ps Params
	for _, c := range lookupCases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			h, pat, res, allow := r.Lookup(c.method, c.path, &ps)
			if res != c.res || pat != c.pattern || h != c.pattern || allow != c.allow {
				t.Fatalf("Lookup(%q, %q) = (%q, %q, %v, %q), want (%q, %q, %v, %q)",
					c.method, c.path, h, pat, res, allow, c.pattern, c.pattern, c.res, c.allow)
			}
			if got := paramsMap(&ps); !maps.Equal(got, c.params) {
				t.Fatalf("params = %v, want %v", got, c.params)
			}
			for name, want := range c.params {
				if v, ok := ps.Get(name); !ok || v != want {
					t.Fatalf("Get(%q) = %q, %v; want %q, true", name, v, ok, want)
				}
			}
			if _, ok := ps.Get("nosuchparam"); ok {
				t.Fatal("Get(nosuchparam) reported ok")
			}
			// The reference matcher must agree.
			ref := refLookup(testRoutes(t), c.method, c.path)
			if ref.res != c.res || ref.pattern != c.pattern || ref.allow != c.allow || !maps.Equal(ref.params, c.params) {
				t.Fatalf("reference = %+v, disagrees with table", ref)
			}
		})
	}
}

func TestLookupNilParamsAndZeroRouter(t *testing.T) {
	r := newTestRouter(t)
	if h, _, res, _ := r.Lookup("GET", "/users/1", nil); res != Found || h != "GET /users/{id}" {
		t.Fatalf("nil params: got %q %v", h, res)
	}
	var z Router[int]
	var ps Params
	if h, pat, res, allow := z.Lookup("GET", "/", &ps); h != 0 || pat != "" || res != NotFound || allow != "" {
		t.Fatalf("zero router: got %v %q %v %q", h, pat, res, allow)
	}
	if z.Len() != 0 || r.Len() != len(testPatterns) {
		t.Fatalf("Len = %d, %d", z.Len(), r.Len())
	}
}

func TestParamsResetOnMiss(t *testing.T) {
	r := newTestRouter(t)
	var ps Params
	r.Lookup("GET", "/users/1/posts/2", &ps)
	if ps.Len() != 2 {
		t.Fatalf("Len = %d", ps.Len())
	}
	r.Lookup("GET", "/nope", &ps)
	if ps.Len() != 0 {
		t.Fatalf("after miss Len = %d", ps.Len())
	}
	ps.Reset()
	if _, ok := ps.Get("id"); ok {
		t.Fatal("Get after Reset reported ok")
	}
}

func TestParamsIndexPanics(t *testing.T) {
	for _, i := range []int{-1, 0, 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Value(%d) on empty Params did not panic", i)
				}
			}()
			var ps Params
			ps.Value(i)
		}()
	}
}

func TestAddErrors(t *testing.T) {
	bad := []string{
		"",
		"GET",
		"GET users",
		" /a",
		"G(T /a",
		"GET /a b",
		"/a?b",
		"/a#b",
		"/a\x00",
		"/a/{",
		"/a/}",
		"/a/{}",
		"/a/{x",
		"/a/x}",
		"/a/b{x}",
		"/a/{x}b",
		"/a/{x-y}",
		"/a/{1x}",
		"/a/{...}",
		"/{x...}/a",
		"/{x}/{x}",
		"/{x}/{x...}",
		"/{{x}}",
	}
	for _, p := range bad {
		var r Router[int]
		err := r.Add(p, 1)
		if !errors.Is(err, ErrInvalidPattern) || !strings.HasPrefix(err.Error(), "router: ") {
			t.Errorf("Add(%q) = %v, want ErrInvalidPattern", p, err)
		}
		if r.Len() != 0 {
			t.Errorf("Add(%q) failed but Len = %d", p, r.Len())
		}
	}

	good := []string{"/", "GET\t/a", "GET  /a/{x}/b", "M-SEARCH /x", "/a//b/", "/{x_1}/{Y...}", "/a%20b/{x}", "/é"}
	for _, p := range good {
		var r Router[int]
		if err := r.Add(p, 1); err != nil {
			t.Errorf("Add(%q) = %v", p, err)
		}
	}

	dups := [][2]string{
		{"GET /u/{id}", "GET /u/{name}"},
		{"/u/{id}", "/u/{x}"},
		{"GET /d", "GET  /d"},
		{"/r/{a...}", "/r/{b...}"},
		{"/", "/"},
	}
	for _, d := range dups {
		var r Router[int]
		if err := r.Add(d[0], 1); err != nil {
			t.Fatalf("Add(%q) = %v", d[0], err)
		}
		err := r.Add(d[1], 2)
		if !errors.Is(err, ErrDuplicatePattern) || !strings.HasPrefix(err.Error(), "router: ") {
			t.Errorf("Add(%q) after %q = %v, want ErrDuplicatePattern", d[1], d[0], err)
		}
		// The first registration is intact.
		path := strings.TrimLeft(strings.TrimPrefix(d[0], "GET"), " ")
		path = strings.NewReplacer("{id}", "1", "{x}", "1", "{a...}", "z").Replace(path)
		if h, _, res, _ := r.Lookup("GET", path, nil); res != Found || h != 1 || r.Len() != 1 {
			t.Errorf("after duplicate %q: Lookup(%q) = %d %v, Len %d", d[1], path, h, res, r.Len())
		}
	}

	// Same shape, different methods or method-less: not duplicates.
	var r Router[int]
	for _, p := range []string{"GET /u/{id}", "POST /u/{name}", "/u/{x}", "HEAD /u/{y}"} {
		if err := r.Add(p, 1); err != nil {
			t.Errorf("Add(%q) = %v", p, err)
		}
	}
}

func TestResultString(t *testing.T) {
	for r, want := range map[Result]string{Found: "Found", NotFound: "NotFound", MethodNotAllowed: "MethodNotAllowed", 9: "Result(9)"} {
		if got := r.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(r), got, want)
		}
	}
}

func TestManyStaticChildren(t *testing.T) {
	// More than mapThreshold static children switches to the map index.
	var r Router[int]
	for i := range 40 {
		if err := r.Add(fmt.Sprintf("GET /s%d/x", i), i); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Add("GET /s7/x", 0); !errors.Is(err, ErrDuplicatePattern) {
		t.Fatalf("duplicate in map-indexed node: %v", err)
	}
	for i := range 40 {
		if h, _, res, _ := r.Lookup("GET", fmt.Sprintf("/s%d/x", i), nil); res != Found || h != i {
			t.Fatalf("/s%d/x: %d %v", i, h, res)
		}
	}
	if _, _, res, _ := r.Lookup("GET", "/s40/x", nil); res != NotFound {
		t.Fatalf("/s40/x: %v", res)
	}
}

func TestNoAllocs(t *testing.T) {
	r := newTestRouter(t)
	var ps Params
	for _, c := range []struct{ method, path string }{
		{"GET", "/users"},
		{"GET", "/users/7/posts/99"},
		{"GET", "/static/a/b/c"},
		{"HEAD", "/g"},
		{"GET", "/1/2/3/4/5/6/7/8"},
		{"GET", "/a/b/c"}, // backtracking
		{"GET", "/nope"},  // 404
		{"GET", "//y"},    // 404
		{"POST", "/users/7"},
	} {
		n := testing.AllocsPerRun(100, func() { r.Lookup(c.method, c.path, &ps) })
		if n != 0 {
			t.Errorf("Lookup(%q, %q): %v allocs, want 0", c.method, c.path, n)
		}
	}
}

// TestConcurrentLookup checks (under -race) that Lookup never writes to the
// Router.
func TestConcurrentLookup(t *testing.T) {
	r := newTestRouter(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			var ps Params
			for i := range 200 {
				c := lookupCases[(g+i)%len(lookupCases)]
				if _, pat, res, allow := r.Lookup(c.method, c.path, &ps); res != c.res || pat != c.pattern || allow != c.allow {
					t.Errorf("Lookup(%q, %q) = %q %v %q", c.method, c.path, pat, res, allow)
					return
				}
			}
		})
	}
	wg.Wait()
}

// ---- reference matcher ----

type refRoute struct {
	method, pattern string
	segs            []patSeg
}

var (
	refOnce   sync.Once
	refRoutes []refRoute
)

func testRoutes(tb testing.TB) []refRoute {
	refOnce.Do(func() {
		for _, p := range testPatterns {
			m, segs, canon, err := parsePattern(p)
			if err != nil {
				panic(err)
			}
			refRoutes = append(refRoutes, refRoute{m, canon, segs})
		}
	})
	return refRoutes
}

type refResult struct {
	res     Result
	pattern string
	params  map[string]string
	allow   string
}

// refMatch matches path against rt by brute force.
func refMatch(rt refRoute, path string) (map[string]string, bool) {
	if path == "" || path[0] != '/' {
		return nil, false
	}
	segs := strings.Split(path[1:], "/")
	var ps map[string]string
	put := func(k, v string) {
		if ps == nil {
			ps = map[string]string{}
		}
		ps[k] = v
	}
	for k, s := range rt.segs {
		if k >= len(segs) {
			return nil, false
		}
		switch s.kind {
		case kindRest:
			put(s.s, strings.Join(segs[k:], "/"))
			return ps, true
		case kindParam:
			if segs[k] == "" {
				return nil, false
			}
			put(s.s, segs[k])
		default:
			if segs[k] != s.s {
				return nil, false
			}
		}
	}
	return ps, len(segs) == len(rt.segs)
}

// refLookup is the specification of Lookup: among routes matching path and
// serving method, pick the one with the lexicographically smallest sequence
// of segment kinds (static < param < rest), then the best method rank.
func refLookup(routes []refRoute, method, path string) refResult {
	var (
		best       *refRoute
		bestParams map[string]string
		bestRank   int
		methods    []string
		anyMatch   bool
	)
	for i := range routes {
		rt := &routes[i]
		ps, ok := refMatch(*rt, path)
		if !ok {
			continue
		}
		anyMatch = true
		if rt.method != "" {
			methods = append(methods, rt.method)
		}
		rank := -1
		switch {
		case rt.method == method:
			rank = 0
		case method == "HEAD" && rt.method == "GET":
			rank = 1
		case rt.method == "":
			rank = 2
		}
		if rank < 0 {
			continue
		}
		if best == nil || refLess(rt, rank, best, bestRank) {
			best, bestParams, bestRank = rt, ps, rank
		}
	}
	switch {
	case best != nil:
		return refResult{Found, best.pattern, bestParams, ""}
	case anyMatch:
		return refResult{MethodNotAllowed, "", nil, allowString(methods)}
	}
	return refResult{NotFound, "", nil, ""}
}

func refLess(a *refRoute, ar int, b *refRoute, br int) bool {
	for i := 0; i < len(a.segs) && i < len(b.segs); i++ {
		if a.segs[i].kind != b.segs[i].kind {
			return a.segs[i].kind < b.segs[i].kind
		}
	}
	if len(a.segs) != len(b.segs) {
		panic("incomparable routes " + a.pattern + " and " + b.pattern)
	}
	return ar < br
}

func FuzzLookup(f *testing.F) {
	for _, c := range lookupCases {
		f.Add(c.method, c.path)
	}
	for _, p := range []string{"/", "//", "///", "/a//c", "/users//posts/1", "/%2F", "/\x00/\xff", "/" + strings.Repeat("a/", 50)} {
		f.Add("GET", p)
	}
	r := newTestRouter(f)
	routes := testRoutes(f)
	f.Fuzz(func(t *testing.T, method, path string) {
		var ps Params
		h, pat, res, allow := r.Lookup(method, path, &ps)
		ref := refLookup(routes, method, path)
		if res != ref.res || pat != ref.pattern || h != ref.pattern || allow != ref.allow {
			t.Fatalf("Lookup(%q, %q) = (%q, %q, %v, %q), reference %+v", method, path, h, pat, res, allow, ref)
		}
		if got := paramsMap(&ps); !maps.Equal(got, ref.params) {
			t.Fatalf("Lookup(%q, %q) params %v, reference %v", method, path, got, ref.params)
		}
		for i := 0; i < ps.Len(); i++ {
			if !strings.Contains(path, ps.Value(i)) {
				t.Fatalf("param %q=%q not in path %q", ps.Name(i), ps.Value(i), path)
			}
		}
		if res == MethodNotAllowed {
			ms := strings.Split(allow, ", ")
			if !slices.IsSorted(ms) || slices.Contains(ms, method) {
				t.Fatalf("bad allow %q for %q", allow, method)
			}
		}
	})
}
