package loop

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/offload"
)

// BenchmarkOffloadDo measures a request whose handler offloads one call that does nothing,
// end to end over loopback (one connection, one request at a time): the task parks, a pool
// worker runs the call, the door brings the resume back to the loop. The "plain" case
// answers without offloading, so the difference between the two is the offloaded call's
// round trip. allocs/op is the server's (the client allocates nothing per request);
// cpu-ns/req is the process's user+system CPU per request (client and server share the
// process), steadier than wall time on a shared machine.
func BenchmarkOffloadDo(b *testing.B) {
	nop := func(context.Context) (int, error) { return 0, nil }
	for _, tc := range []struct {
		name string
		h    HandlerFunc
	}{
		{"plain", func(c *Ctx) { c.String(200, "Hello, World!") }},
		{"offload", func(c *Ctx) {
			if _, err := offload.Do(c, nop); err != nil {
				c.String(500, err.Error())
				return
			}
			c.String(200, "Hello, World!")
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			_, addr := startServer(b, Config{}, func(s *Server) { s.Handle("GET /", tc.h) })
			pc := newPlainClient(b, addr, 1, 1)
			defer pc.close()
			pc.run(b, 1000) // warm up: pooled contexts, coroutines, workers
			b.ReportAllocs()
			var ru0, ru1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			elapsed := pc.run(b, b.N)
			b.StopTimer()
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/req")
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/req")
		})
	}
}
