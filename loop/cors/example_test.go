package cors_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/cors"
)

// The game's web client at https://play.example.com may call the API with its cookies:
// the preflight of a PUT is answered by the middleware (cached for 10 minutes), the PUT
// itself gets the origin back, and another site's preflight is refused.
func Example() {
	mw, err := cors.New(cors.Config{
		AllowedOrigins:   []string{"https://play.example.com"},
		AllowedMethods:   []string{"PUT"},
		AllowedHeaders:   []string{"X-Token"},
		AllowCredentials: true,
		MaxAge:           10 * time.Minute,
	})
	if err != nil {
		panic(err)
	}
	srv := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv.Use(mw)
	srv.Handle("PUT /api/profile", func(c *loop.Ctx) { c.String(200, "saved") })
	srv.Handle("OPTIONS /{path...}", func(c *loop.Ctx) { c.Bytes(204, "", nil) }) // lets preflights reach the middleware
	go func() { _ = srv.ListenAndServe() }()
	<-srv.Ready()
	defer srv.Close()
	cl := &http.Client{}
	defer cl.CloseIdleConnections() // before the server closes

	call := func(method, origin string, hdr ...string) {
		req, _ := http.NewRequest(method, "http://"+srv.Addr().String()+"/api/profile", nil)
		req.Header.Set("Origin", origin)
		for i := 0; i < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := cl.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fmt.Printf("%s from %s: %d %q allow-origin=%q methods=%q max-age=%q\n", method, origin, resp.StatusCode, body,
			resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Get("Access-Control-Allow-Methods"),
			resp.Header.Get("Access-Control-Max-Age"))
	}
	call("OPTIONS", "https://play.example.com", "Access-Control-Request-Method", "PUT", "Access-Control-Request-Headers", "x-token")
	call("PUT", "https://play.example.com")
	call("OPTIONS", "https://evil.example", "Access-Control-Request-Method", "PUT")
	// Output:
	// OPTIONS from https://play.example.com: 204 "" allow-origin="https://play.example.com" methods="GET, HEAD, POST, PUT" max-age="600"
	// PUT from https://play.example.com: 200 "saved" allow-origin="https://play.example.com" methods="" max-age=""
	// OPTIONS from https://evil.example: 403 "cors: origin not allowed\n" allow-origin="" methods="" max-age=""
}
