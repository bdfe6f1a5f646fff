package httpcodec

import (
	"strings"
	"testing"
)

// benchWSFrames builds the client frame of a text message of n bytes.
func benchWSFrame(n int) []byte { return wsFrame(WSText, true, strings.Repeat("x", n)) }

// The parse benchmarks copy the frame back before each parse (unmasking is
// in place), so they include one memmove of the frame.
func benchWSParse(b *testing.B, n int) {
	frame := benchWSFrame(n)
	buf := make([]byte, len(frame))
	var f WSFrame
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, frame)
		if _, err := ParseWSFrame(buf, 1<<20, &f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseWSFrame16(b *testing.B)  { benchWSParse(b, 16) }
func BenchmarkParseWSFrame128(b *testing.B) { benchWSParse(b, 128) }
func BenchmarkParseWSFrame4K(b *testing.B)  { benchWSParse(b, 4096) }
func BenchmarkParseWSFrame64K(b *testing.B) { benchWSParse(b, 65536) }

// BenchmarkWSReaderText reads a 128-byte text message: frame parse,
// unmasking and UTF-8 check.
func BenchmarkWSReaderText128(b *testing.B) {
	frame := benchWSFrame(128)
	buf := make([]byte, len(frame))
	var r WSReader
	var m WSMessage
	b.SetBytes(128)
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, frame)
		if _, ok, err := r.Next(buf, &m); err != nil || !ok {
			b.Fatal(err)
		}
	}
}

// BenchmarkWSReaderFragmented reads a text message of 4 fragments of 1 KiB
// with a ping between them: reassembly and incremental UTF-8.
func BenchmarkWSReaderFragmented(b *testing.B) {
	part := strings.Repeat("é", 512)
	stream := concat(wsFrame(WSText, false, part), wsFrame(WSContinuation, false, part),
		wsFrame(WSPing, true, "p"), wsFrame(WSContinuation, false, part), wsFrame(WSContinuation, true, part))
	buf := make([]byte, len(stream))
	var r WSReader
	var m WSMessage
	b.SetBytes(4 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, stream)
		for p := buf; len(p) > 0; {
			n, _, err := r.Next(p, &m)
			if err != nil {
				b.Fatal(err)
			}
			p = p[n:]
		}
	}
}

func benchWSWrite(b *testing.B, n int) {
	p := []byte(strings.Repeat("x", n))
	dst := make([]byte, 0, n+16)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = AppendWSFrame(dst[:0], WSText, true, p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendWSFrame16(b *testing.B)  { benchWSWrite(b, 16) }
func BenchmarkAppendWSFrame128(b *testing.B) { benchWSWrite(b, 128) }
func BenchmarkAppendWSFrame4K(b *testing.B)  { benchWSWrite(b, 4096) }

// BenchmarkWSBroadcast appends one encoded 128-byte message to 100
// outputs: the per-connection cost of a broadcast.
func BenchmarkWSBroadcast100(b *testing.B) {
	frame, _ := AppendWSFrame(nil, WSText, true, []byte(strings.Repeat("x", 128)))
	outs := make([][]byte, 100)
	for i := range outs {
		outs[i] = make([]byte, 0, 4096)
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := range outs {
			outs[i] = append(outs[i][:0], frame...)
		}
	}
}

func BenchmarkWSHandshake(b *testing.B) {
	var p Parser
	var req Request
	head := []byte(wsUpgradeHead)
	out := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.ParseHead(head, &req); err != nil {
			b.Fatal(err)
		}
		key, err := CheckWSUpgrade(&req)
		if err != nil {
			b.Fatal(err)
		}
		proto, _ := WSSelectProtocol(&req, []string{"chat"})
		out, _ = AppendWSUpgradeResponse(out[:0], key, proto)
	}
}

func BenchmarkWSMask4K(b *testing.B) {
	p := make([]byte, 4096)
	b.SetBytes(4096)
	for b.Loop() {
		maskWS(p, 0x12345678)
	}
}
