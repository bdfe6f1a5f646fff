package loop

import (
	"testing"
	"time"
)

// BenchmarkServeNoIOPipelined is BenchmarkServeNoIO's depth=16 case for one server at a
// time (accounting on, then off), so that a CPU profile of one sub-benchmark holds one
// server's work only: the per-stage figures in docs/bench.md come from it. One op is one
// request; it reports "cpu-ns/req", the process's CPU time per request.
func BenchmarkServeNoIOPipelined(b *testing.B) {
	for _, acct := range []bool{true, false} {
		b.Run(map[bool]string{true: "acct=on", false: "acct=off"}[acct], func(b *testing.B) {
			fs := newFakeServer(b, Config{NoAccounting: !acct}, 1, 16)
			reads := (b.N + 15) / 16
			b.ReportAllocs()
			b.ResetTimer()
			var wall, cpu time.Duration
			for done := 0; done < reads; done += 256 {
				wall, cpu = addServe(fs, min(256, reads-done), wall, cpu)
			}
			b.StopTimer()
			fs.check(b)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(reads*16), "cpu-ns/req")
		})
	}
}
