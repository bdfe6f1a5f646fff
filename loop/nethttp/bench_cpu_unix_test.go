//go:build unix

package nethttp

import (
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
)

// BenchmarkHTTPAdapterCPU is BenchmarkHTTPAdapter's net/http handler through the adapter,
// one mode at a time, measured in the process's CPU time (user and system, client
// included) per request rather than in round-trip time: on a shared machine a round trip
// is mostly wake-up latency, which other processes' load moves by 2x, while the CPU a
// request costs moves far less.
func BenchmarkHTTPAdapterCPU(b *testing.B) {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "Hello, World!")
	})
	for _, multi := range []bool{false, true} {
		name := map[bool]string{false: "single", true: "multi"}[multi]
		b.Run(name, func(b *testing.B) {
			_, addr := startServer(b, loop.Config{MultiThread: multi}, func(s *loop.Server) { handle(b, s, "/", hello) })
			c := newRTConn(b, addr)
			c.roundTrips(b, 200) // warm: the pools, the gate, the route
			before := processCPU(b)
			b.ResetTimer()
			c.roundTrips(b, b.N)
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/req")
		})
	}
}

// processCPU returns the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
