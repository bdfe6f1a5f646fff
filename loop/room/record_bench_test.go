package room

import (
	"testing"
	"time"
)

// BenchmarkRecordTick is the accounting side of one room tick: two histogram records, the
// budget check and a loop-time charge.
func BenchmarkRecordTick(b *testing.B) {
	r := newRecord("r", 50*time.Millisecond, 25*time.Millisecond, 0)
	b.ReportAllocs()
	for i := range b.N {
		r.Tick(time.Duration(i&1023)*time.Microsecond, 20*time.Microsecond, 20*time.Microsecond)
		r.LoopTime(int64(i)*1000, 20*time.Microsecond)
	}
}
