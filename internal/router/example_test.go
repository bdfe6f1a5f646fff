package router_test

import (
	"fmt"

	"github.com/batonrt/baton/internal/router"
)

func ExampleRouter() {
	var r router.Router[string]
	for _, p := range []string{
		"GET /users/{id}",
		"PUT /users/{id}",
		"GET /users/me",
		"GET /static/{path...}",
	} {
		if err := r.Add(p, "handler for "+p); err != nil {
			panic(err)
		}
	}

	var ps router.Params
	show := func(method, path string) {
		h, pattern, res, allow := r.Lookup(method, path, &ps)
		switch res {
		case router.Found:
			fmt.Printf("%s %s -> %q (%s)", method, path, h, pattern)
			for i := 0; i < ps.Len(); i++ {
				fmt.Printf(" %s=%q", ps.Name(i), ps.Value(i))
			}
			fmt.Println()
		case router.MethodNotAllowed:
			fmt.Printf("%s %s -> 405, Allow: %s\n", method, path, allow)
		default:
			fmt.Printf("%s %s -> %v\n", method, path, res)
		}
	}
	show("GET", "/users/42")
	show("GET", "/users/me")
	show("HEAD", "/static/css/site.css")
	show("DELETE", "/users/42")
	show("GET", "/nope")

	err := r.Add("GET /users/{name}", "again")
	fmt.Println(err)
	// Output:
	// GET /users/42 -> "handler for GET /users/{id}" (GET /users/{id}) id="42"
	// GET /users/me -> "handler for GET /users/me" (GET /users/me)
	// HEAD /static/css/site.css -> "handler for GET /static/{path...}" (GET /static/{path...}) path="css/site.css"
	// DELETE /users/42 -> 405, Allow: GET, HEAD, PUT
	// GET /nope -> NotFound
	// router: duplicate pattern "GET /users/{name}": same method and path shape as "GET /users/{id}"
}
