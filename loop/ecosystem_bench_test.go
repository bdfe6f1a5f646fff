package loop

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"
)

// BenchmarkEcosystemCost measures what the optional ecosystem features add to
// BenchmarkServeNoIO's request path, against the same server without them, interleaved in
// one run: pprof route labels, a request hook that does nothing, and the access logger
// (every request, and one in 100) writing to a discarding slog handler.
func BenchmarkEcosystemCost(b *testing.B) {
	noop := func(*RequestRecord) {}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	variants := []struct {
		name string
		cfg  func(b *testing.B) Config
	}{
		{"labels", func(*testing.B) Config { return Config{ProfileLabels: true} }},
		{"hook-noop", func(*testing.B) Config { return Config{OnRequestDone: noop} }},
		{"accesslog-every", func(b *testing.B) Config {
			al, _ := NewAccessLogger(discard, AccessLogOptions{Buffer: 1 << 16})
			b.Cleanup(al.Close)
			return Config{OnRequestDone: al.Record}
		}},
		{"accesslog-1in100", func(b *testing.B) Config {
			al, _ := NewAccessLogger(discard, AccessLogOptions{SampleEvery: 100})
			b.Cleanup(al.Close)
			return Config{OnRequestDone: al.Record}
		}},
	}
	for _, v := range variants {
		for _, depth := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/depth=%d", v.name, depth), func(b *testing.B) {
				base := newFakeServer(b, Config{}, 1, depth)
				with := newFakeServer(b, v.cfg(b), 1, depth)
				reads := max(4096/depth, 1)
				b.ReportAllocs()
				b.ResetTimer()
				var tBase, tWith time.Duration
				n := 0
				for r := 0; n < b.N; r++ {
					if r%2 == 0 {
						tBase += base.serve(reads)
						tWith += with.serve(reads)
					} else {
						tWith += with.serve(reads)
						tBase += base.serve(reads)
					}
					n += reads * depth
				}
				b.StopTimer()
				base.check(b)
				with.check(b)
				b.ReportMetric(float64(tBase.Nanoseconds())/float64(n), "base-ns/req")
				b.ReportMetric(float64(tWith.Nanoseconds())/float64(n), "with-ns/req")
				b.ReportMetric((float64(tWith)/float64(tBase)-1)*100, "cost-%")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
