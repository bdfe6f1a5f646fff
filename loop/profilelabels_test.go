package loop

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spinWork is a fixed amount of CPU work (a few hundred milliseconds), so that the
// number of profile samples does not depend on how loaded the machine is.
const spinWork = 300_000_000

// burnSink receives burn's results.
var burnSink atomic.Int64

// burn does n steps of work.
func burn(n int) int {
	x := 0
	for i := range n {
		x += i ^ (x >> 3)
	}
	return x
}

// spin burns spinWork on the loop, yielding between pieces.
func spin(c *Ctx) {
	x := 0
	for range 300 {
		x += burn(spinWork / 300)
		_ = c.Sleep(0)
	}
	burnSink.Add(int64(x)) // keeps the work from being optimised away
	c.String(200, "spun")
}

// TestProfileLabelsSplitCPUByRoute profiles a server whose routes spin and checks that
// the samples carry their route's label.
func TestProfileLabelsSplitCPUByRoute(t *testing.T) {
	bothModes(t, func(t *testing.T, multi bool) {
		_, addr := startServer(t, Config{MultiThread: multi, ProfileLabels: true}, func(s *Server) {
			s.Handle("GET /spin", spin)
			s.Handle("GET /offloop", func(c *Ctx) { // what loop/nethttp does for a net/http handler
				ev := NewFuture[struct{}](c.Loop())
				s.RunOffLoop(func() {
					burnSink.Add(int64(burn(spinWork)))
					ev.Resolve(struct{}{}, nil)
				})
				_, _ = ev.Await(c, 0)
				c.String(200, "spun")
			})
		})
		var prof bytes.Buffer
		require.NoError(t, pprof.StartCPUProfile(&prof))
		var wg sync.WaitGroup
		for _, path := range []string{"/spin", "/offloop"} {
			c := dial(t, addr)
			c.send("GET " + path + " HTTP/1.1\r\nHost: t\r\n\r\n")
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, body, err := c.tryRead("GET")
				if assert.NoError(t, err) {
					assert.Equal(t, 200, resp.StatusCode)
					assert.Equal(t, "spun", body)
				}
			}()
		}
		wg.Wait()
		pprof.StopCPUProfile()
		byLabel, err := samplesByLabel(prof.Bytes(), "route")
		require.NoError(t, err)
		t.Logf("samples by route label: %v", byLabel)
		assert.Positive(t, byLabel["GET /spin"], "no CPU sample labelled with the spinning route")
		assert.Positive(t, byLabel["GET /offloop"], "a RunOffLoop goroutine inherits the route's label")
	})
}

// TestProfileLabelsOffByDefault: without the option, no sample carries a route label.
func TestProfileLabelsOffByDefault(t *testing.T) {
	_, addr := startServer(t, Config{}, func(s *Server) {
		s.Handle("GET /spin", spin)
	})
	var prof bytes.Buffer
	require.NoError(t, pprof.StartCPUProfile(&prof))
	resp, _ := dial(t, addr).get("/spin")
	pprof.StopCPUProfile()
	mustStatus(t, resp, 200)
	byLabel, err := samplesByLabel(prof.Bytes(), "route")
	require.NoError(t, err)
	assert.Empty(t, byLabel)
}

// samplesByLabel reads a gzipped pprof profile (profile.proto) and sums the sample counts
// (the first value of each sample) by the value of the string label key. A minimal protobuf reader: the profile package is
// not a dependency of this module.
func samplesByLabel(gz []byte, key string) (map[string]int, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var strs []string
	var samples [][]byte
	err = protoFields(raw, func(num int, wire int, v uint64, b []byte) error {
		switch {
		case num == 2 && wire == 2: // Profile.sample
			samples = append(samples, b)
		case num == 6 && wire == 2: // Profile.string_table
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, smp := range samples {
		var count int64
		var labels []string
		err := protoFields(smp, func(num int, wire int, v uint64, b []byte) error {
			if num == 2 { // Sample.value: packed (wire 2) or not; the first is the count
				if wire == 0 && count == 0 {
					count = int64(v)
				} else if wire == 2 && len(b) > 0 {
					c, _ := binary.Uvarint(b)
					count = int64(c)
				}
				return nil
			}
			if num != 3 || wire != 2 { // Sample.label
				return nil
			}
			var k, s int64
			err := protoFields(b, func(num int, wire int, v uint64, _ []byte) error {
				switch {
				case num == 1 && wire == 0:
					k = int64(v)
				case num == 2 && wire == 0:
					s = int64(v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if k < int64(len(strs)) && s < int64(len(strs)) && strs[k] == key {
				labels = append(labels, strs[s])
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, l := range labels {
			out[l] += int(count)
		}
	}
	return out, nil
}

// protoFields calls f for every field of a protobuf message: its number, wire type, and
// value (varint) or bytes (length-delimited).
func protoFields(b []byte, f func(num, wire int, v uint64, b []byte) error) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("bad tag")
		}
		b = b[n:]
		num, wire := int(tag>>3), int(tag&7)
		var v uint64
		var data []byte
		switch wire {
		case 0:
			v, n = binary.Uvarint(b)
			if n <= 0 {
				return errors.New("bad varint")
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return errors.New("short fixed64")
			}
			b = b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return errors.New("bad length")
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return errors.New("short fixed32")
			}
			b = b[4:]
		default:
			return errors.New("bad wire type")
		}
		if err := f(num, wire, v, data); err != nil {
			return err
		}
	}
	return nil
}
