package loop_test

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/batonrt/baton/loop"
)

// An existing net/http application (here a ServeMux with a JSON endpoint) mounted under a
// prefix of a baton server, beside baton's own handlers. The net/http handlers run on
// goroutines of their own, never on the loop.
func ExampleServer_HandleHTTP() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /legacy/version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"version": "1.2.3"})
	})
	s := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: quiet()})
	s.HandleHTTP("/legacy/", mux)
	s.Handle("GET /native", func(c *loop.Ctx) { c.String(200, "on the loop") })
	url := serve(s)
	defer s.Close()

	fmt.Println(get(url + "/legacy/version"))
	fmt.Println(get(url + "/native"))
	// Output:
	// 200 {"version":"1.2.3"}
	// 200 on the loop
}
