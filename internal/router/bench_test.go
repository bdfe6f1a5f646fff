package router

import "testing"

// benchRouter registers an API-like route set of ~40 routes.
func benchRouter(b *testing.B) *Router[int] {
	b.Helper()
	var r Router[int]
	patterns := []string{
		"GET /", "GET /health", "GET /metrics", "GET /static/{path...}",
		"GET /users", "POST /users", "GET /users/me",
		"GET /users/{id}", "PUT /users/{id}", "DELETE /users/{id}",
		"GET /users/{id}/posts", "POST /users/{id}/posts",
		"GET /users/{id}/posts/{post}", "DELETE /users/{id}/posts/{post}",
		"GET /users/{id}/followers", "GET /users/{id}/following",
		"GET /orgs/{org}", "GET /orgs/{org}/repos", "GET /orgs/{org}/members/{user}",
		"GET /repos/{owner}/{repo}", "GET /repos/{owner}/{repo}/issues",
		"GET /repos/{owner}/{repo}/issues/{n}", "GET /repos/{owner}/{repo}/pulls/{n}",
		"GET /repos/{owner}/{repo}/contents/{path...}",
		"GET /search/repositories", "GET /search/code", "GET /search/issues",
		"GET /gists", "POST /gists", "GET /gists/{id}", "GET /gists/{id}/star",
		"GET /notifications", "PUT /notifications",
		"GET /emojis", "GET /events", "GET /feeds", "GET /rate_limit",
		"/debug/{what...}",
	}
	for i, p := range patterns {
		if err := r.Add(p, i); err != nil {
			b.Fatal(err)
		}
	}
	return &r
}

func benchLookup(b *testing.B, method, path string, want Result) {
	r := benchRouter(b)
	var ps Params
	if _, _, res, _ := r.Lookup(method, path, &ps); res != want {
		b.Fatalf("Lookup(%q, %q) = %v, want %v", method, path, res, want)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Lookup(method, path, &ps)
	}
}

func BenchmarkLookupStatic(b *testing.B) { benchLookup(b, "GET", "/search/repositories", Found) }
func BenchmarkLookupParam2(b *testing.B) { benchLookup(b, "GET", "/users/12345/posts/678", Found) }
func BenchmarkLookupParam4(b *testing.B) {
	benchLookup(b, "GET", "/repos/batonrt/baton/issues/42", Found)
}
func BenchmarkLookupNotFound(b *testing.B) { benchLookup(b, "GET", "/users/12345/nope", NotFound) }
func BenchmarkLookupMethodNotAllowed(b *testing.B) {
	benchLookup(b, "POST", "/users/12345", MethodNotAllowed)
}
