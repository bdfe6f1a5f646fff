// Command baton-bench-server runs one of baton-bench's built-in targets (baton or the
// net/http baseline) with every scenario's routes, for measuring it by hand with another
// load generator such as wrk:
//
//	cd bench && go run ./cmd/baton-bench-server -target baton -addr 127.0.0.1:8081
//	wrk -t1 -c64 -d10s http://127.0.0.1:8081/plaintext
//
// It prints "baton-bench listening on ADDR" once it accepts connections and stops on
// SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // -pprof
	"os"
	"runtime"

	"github.com/batonrt/baton/bench/servers"
)

func main() {
	target := flag.String("target", servers.Baton, "server to run: baton or nethttp")
	addr := flag.String("addr", "127.0.0.1:8081", "listen address (port 0 picks one)")
	shards := flag.Int("shards", 1, "baton's Config.Shards: event loops (more than 1: plaintext and rooms routes only)")
	pprofAddr := flag.String("pprof", "", "loopback address to serve net/http/pprof on (profiles of the server while it is loaded)")
	memRate := flag.Int("memprofilerate", 0, "runtime.MemProfileRate when above 0 (1: every allocation in -pprof's allocs profile)")
	flag.Parse()
	if *memRate > 0 {
		runtime.MemProfileRate = *memRate
	}
	if *pprofAddr != "" {
		ln, err := net.Listen("tcp", *pprofAddr)
		if err == nil && !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
			err = fmt.Errorf("%s is not a loopback address", *pprofAddr)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "baton-bench-server: -pprof:", err)
			os.Exit(2)
		}
		go func() { _ = http.Serve(ln, nil) }()
	}
	if err := servers.ServeChildWith(*target, *addr, servers.Options{Shards: *shards}, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "baton-bench-server:", err)
		os.Exit(1)
	}
}
