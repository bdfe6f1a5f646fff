package compress

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// json64K is a leaderboard of 705 rows in JSON, 64 KiB.
func json64K(b *testing.B) []byte {
	body, err := json.Marshal(leaderboard(705))
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkCompress64KiBJSON: the pool worker's CPU for a 64 KiB JSON body at levels 1
// (the default), 5 and 9, and the bytes it becomes (wire-bytes, ratio). allocs/op shows
// the pooled writer and buffer: none made per response once warm.
func BenchmarkCompress64KiBJSON(b *testing.B) {
	body := json64K(b)
	for _, level := range []int{1, 5, 9} {
		b.Run(fmt.Sprintf("level=%d", level), func(b *testing.B) {
			p := newPolicy(Config{Level: level})
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var n int
			for b.Loop() {
				out, err := p.compress(context.Background(), body)
				if err != nil {
					b.Fatal(err)
				}
				n = out.Len()
				releaseBuffer(out)
			}
			b.ReportMetric(float64(n), "wire-bytes")
			b.ReportMetric(float64(len(body))/float64(n), "ratio")
			b.ReportMetric(float64(len(body)), "body-bytes")
		})
	}
}

// BenchmarkEncodeJSON64KiB: what JSON spends on the handler's task before the pool: the
// encoding into a pooled buffer (Ctx.JSON's json.Marshal, for comparison, allocates the
// body every time).
func BenchmarkEncodeJSON64KiB(b *testing.B) {
	rows := leaderboard(705)
	b.Run("pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e := encoders.Get().(*encoder)
			e.buf.Reset()
			if err := e.enc.Encode(rows); err != nil {
				b.Fatal(err)
			}
			e.release()
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(rows); err != nil {
				b.Fatal(err)
			}
		}
	})
}
