package ws

import (
	"bytes"
	stdflate "compress/flate"
	"testing"

	"github.com/klauspost/compress/flate"

	"github.com/batonrt/baton/internal/httpcodec"
)

// benchStates is a minute of a 20 Hz game state (about 1 KiB of JSON, 4 players), tick by
// tick: consecutive states differ in positions, health and scores, as in a game.
func benchStates() [][]byte {
	s := make([][]byte, 1200)
	for i := range s {
		s[i] = gameState(i)
	}
	return s
}

// BenchmarkDeflateGameState measures a 20 Hz JSON game state (gameState: 4 players,
// about 1 KiB) per message, both ways: send is what the sending task spends to frame it
// (compress included), receive what the loop spends to turn the client's frame into the
// message (decompress included; the client's compression is not timed). wire-B/msg is
// the frame's size on the wire. plain is no compression; deflate without context takeover
// (the default, and what a PreparedMessage's frame is); takeover with context takeover;
// stdlib-send is compress/flate at BestSpeed without takeover, for comparison.
func BenchmarkDeflateGameState(b *testing.B) {
	states := benchStates()
	for _, mode := range []string{"plain", "deflate", "takeover"} {
		b.Run(mode+"/send", func(b *testing.B) {
			st := &loopState{}
			d := &deflateConn{threshold: 128, window: deflateWindow, outTake: mode == "takeover"}
			var buf []byte
			wire := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				p := states[i%len(states)]
				if mode == "plain" {
					buf, _ = httpcodec.AppendWSFrame(buf[:0], httpcodec.WSText, true, p)
				} else {
					var ok bool
					if buf, ok = st.deflateFrame(buf, httpcodec.WSText, p, d.dict(len(p)), d.window); ok {
						d.sentCompressed(p)
					}
				}
				wire += len(buf)
			}
			b.ReportMetric(float64(wire)/float64(b.N), "wire-B/msg")
		})
		b.Run(mode+"/receive", func(b *testing.B) {
			// The client's frames, made ahead (masked): zlib-like, one stream when it
			// takes its context over, a fresh one per message otherwise.
			var frames [][]byte
			var z bytes.Buffer
			fw, _ := flate.NewWriter(&z, flate.BestSpeed)
			for _, p := range states {
				if mode == "plain" {
					frames = append(frames, rawFrame(0x81, p))
					continue
				}
				if mode != "takeover" {
					fw.Reset(&z)
				}
				z.Reset()
				_, _ = fw.Write(p)
				_ = fw.Flush()
				frames = append(frames, rawFrame(0xc1, bytes.TrimSuffix(z.Bytes(), deflateTail[:])))
			}
			st := &loopState{}
			d := &deflateConn{inTake: mode == "takeover"}
			var m httpcodec.WSMessage
			var rd httpcodec.WSReader
			wire := 0
			var in []byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k := i % len(states)
				if k == 0 {
					d.inDict = d.inDict[:0] // the stream starts again
				}
				in = append(in[:0], frames[k]...) // unmasked in place
				wire += len(in)
				if mode != "plain" {
					d.frameHead(in)
				}
				if _, ok, err := rd.Next(in, &m); !ok || err != nil {
					b.Fatal(err)
				}
				if mode != "plain" {
					if _, err := st.inflate(d, m.Payload, 1<<20); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(wire)/float64(b.N), "wire-B/msg")
		})
	}
	b.Run("stdlib-send", func(b *testing.B) {
		var z bytes.Buffer
		fw, _ := stdflate.NewWriter(&z, stdflate.BestSpeed)
		wire := 0
		b.ReportAllocs()
		for i := range b.N {
			z.Reset()
			fw.Reset(&z)
			_, _ = fw.Write(states[i%len(states)])
			_ = fw.Flush()
			wire += z.Len() - 4 + 4 // tail stripped, frame header of 4
		}
		b.ReportMetric(float64(wire)/float64(b.N), "wire-B/msg")
	})
}
