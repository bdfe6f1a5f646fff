package loop

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSpareProc: GOMAXPROCS 1 becomes 2 unless kept or set by the environment; other
// values are left alone.
func TestSpareProc(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cases := []struct {
		name     string
		keep     bool
		env      string
		procs    int
		loops    int
		from, to int
	}{
		{name: "one is raised", procs: 1, from: 1, to: 2},
		{name: "kept by config", keep: true, procs: 1, from: 1, to: 1},
		{name: "kept by the environment", env: "1", procs: 1, from: 1, to: 1},
		{name: "two left alone", procs: 2, from: 2, to: 2},
		{name: "eight left alone", procs: 8, from: 8, to: 8},
		{name: "two shards on two Ps", procs: 2, loops: 2, from: 2, to: 3},
		{name: "four shards on two Ps", procs: 2, loops: 4, from: 2, to: 5},
		{name: "two shards on four Ps left alone", procs: 4, loops: 2, from: 4, to: 4},
		{name: "shards kept by the environment", env: "2", procs: 2, loops: 2, from: 2, to: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cur := tc.procs
			set := func(n int) int {
				old := cur
				if n > 0 {
					cur = n
				}
				return old
			}
			getenv := func(k string) string {
				if k == "GOMAXPROCS" {
					return tc.env
				}
				return ""
			}
			from, to := spareProc(tc.keep, max(tc.loops, 1), getenv, set, log)
			assert.Equal(t, tc.from, from)
			assert.Equal(t, tc.to, to)
			assert.Equal(t, tc.to, cur, "GOMAXPROCS after the call")
		})
	}
}
