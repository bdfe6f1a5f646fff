package compress_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/compress"
)

// A leaderboard of 200 rows answered through compress.JSON: a client that accepts gzip
// gets it coded (compressed in the offload pool, not on the loop), one that does not gets
// the JSON as it is; both responses vary by Accept-Encoding.
func Example() {
	type row struct {
		Rank   int    `json:"rank"`
		Player string `json:"player"`
		Score  int    `json:"score"`
	}
	rows := make([]row, 200)
	for i := range rows {
		rows[i] = row{i + 1, fmt.Sprintf("player-%03d", i), 10000 - 7*i}
	}
	srv := loop.New(loop.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv.Handle("GET /leaderboard", func(c *loop.Ctx) {
		if err := compress.JSON(c, 200, rows); err != nil {
			slog.Warn("leaderboard sent uncompressed", "err", err)
		}
	})
	go func() { _ = srv.ListenAndServe() }()
	<-srv.Ready()
	defer srv.Close()
	cl := &http.Client{Transport: &http.Transport{DisableCompression: true}} // show the wire bytes
	defer cl.CloseIdleConnections()                                          // before the server closes

	for _, ae := range []string{"gzip, deflate, br", "gzip;q=0"} {
		req, _ := http.NewRequest("GET", "http://"+srv.Addr().String()+"/leaderboard", nil)
		req.Header.Set("Accept-Encoding", ae)
		resp, err := cl.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fmt.Printf("Accept-Encoding %q: %d, Content-Encoding %q, Vary %q, smaller than 3000 bytes: %v, JSON: %v\n",
			ae, resp.StatusCode, resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"), len(body) < 3000,
			strings.HasPrefix(string(body), `[{"rank":1,`))
	}
	// Output:
	// Accept-Encoding "gzip, deflate, br": 200, Content-Encoding "gzip", Vary "Accept-Encoding", smaller than 3000 bytes: true, JSON: false
	// Accept-Encoding "gzip;q=0": 200, Content-Encoding "", Vary "Accept-Encoding", smaller than 3000 bytes: false, JSON: true
}
