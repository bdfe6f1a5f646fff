package httpcodec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// wsFuzzLimits are the limit sets the WebSocket fuzzers pick from.
var wsFuzzLimits = []Config{
	{},
	{MaxWSFrameBytes: 8, MaxWSMessageBytes: 20},
	{MaxWSMessageBytes: 130},
}

func addWSSeeds(f *testing.F) {
	r := rand.New(rand.NewPCG(11, 12))
	seeds := [][]byte{
		wsFrame(WSText, true, "hello"),
		concat(wsFrame(WSText, false, "h\xe2"), wsFrame(WSPing, true, "p"), wsFrame(WSContinuation, true, "\x82\xacllo")),
		concat(wsFrame(WSBinary, false, "0123456789"), wsFrame(WSContinuation, true, "0123456789abc")),
		wsFrame(WSBinary, true, strings.Repeat("b", 300)),
		wsFrame(WSClose, true, "\x03\xe8bye"),
		wsFrame(WSClose, true, "\x03"),
		wsClientFrame(0x82, []byte("abc"), 7, 64),
		wsClientFrame(0xC1, []byte("a"), 7, 0),
		{0x81, 0x01, 'a'},
		{0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0},
	}
	for range 20 {
		seeds = append(seeds, wsGenStream(r, r.IntN(2) == 0))
	}
	for _, s := range seeds {
		for sel := range uint8(len(wsFuzzLimits)) {
			f.Add(s, sel)
		}
	}
}

// refParseFrame is an independent, byte-by-byte reading of RFC 6455 §5.2
// for one client frame: it returns the rendering parseFrameSummary gives.
func refParseFrame(b []byte, max int64) string {
	if len(b) < 1 {
		return "err -1"
	}
	fin, rsv, op := b[0]>>7, (b[0]>>4)&7, WSOpcode(b[0]&15)
	if rsv != 0 {
		return "err 1002"
	}
	if !(op <= 2 || op >= 8 && op <= 10) {
		return "err 1002"
	}
	control := op >= 8
	if control && fin == 0 {
		return "err 1002"
	}
	if len(b) < 2 {
		return "err -1"
	}
	if b[1]>>7 == 0 {
		return "err 1002"
	}
	l7 := int(b[1] & 127)
	if control && l7 > 125 {
		return "err 1002"
	}
	var length uint64
	pos := 2
	switch l7 {
	case 126:
		if len(b) < 4 {
			return "err -1"
		}
		length = uint64(b[2])<<8 | uint64(b[3])
		if length < 126 {
			return "err 1002"
		}
		pos = 4
	case 127:
		if len(b) >= 3 && b[2]&0x80 != 0 {
			return "err 1002"
		}
		if len(b) < 10 {
			return "err -1"
		}
		for i := 2; i < 10; i++ {
			length = length<<8 | uint64(b[i])
		}
		if length < 65536 {
			return "err 1002"
		}
		pos = 10
	default:
		length = uint64(l7)
	}
	if !control && length > uint64(max) {
		return "err 1009"
	}
	if len(b) < pos+4 || uint64(len(b)-pos-4) < length {
		return "err -1"
	}
	key := b[pos : pos+4]
	pos += 4
	p := make([]byte, length)
	for i := range p {
		p[i] = b[pos+i] ^ key[i%4]
	}
	return fmt.Sprintf("n=%d fin=%v op=%v p=%q", pos+int(length), fin == 1, op, p)
}

// FuzzParseWSFrame checks ParseWSFrame against refParseFrame, and that
// every prefix of the input gives ErrNeedMore without touching the bytes,
// or the same result.
func FuzzParseWSFrame(f *testing.F) {
	addWSSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, sel uint8) {
		max := []int64{1 << 20, 8, 130}[int(sel)%3]
		want := refParseFrame(data, max)
		if got := parseFrameSummary(bytes.Clone(data), max); got != want {
			t.Fatalf("ParseWSFrame %s\nreference %s\ninput %q", got, want, data)
		}
		checkFrameSplits(t, data, max, want)
	})
}

// FuzzWSReader checks that WSReader gives the same events whole, split in
// two anywhere, and byte by byte; that text messages are UTF-8 and
// messages within the limits.
func FuzzWSReader(f *testing.F) {
	addWSSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, sel uint8) {
		cfg := wsFuzzLimits[int(sel)%len(wsFuzzLimits)]
		norm := cfg.normalized()
		want := readAll(t, cfg, data)
		var r WSReader
		r.Init(cfg)
		var m WSMessage
		buf := bytes.Clone(data)
		for {
			n, ok, err := r.Next(buf, &m)
			if err != nil {
				break
			}
			if n <= 0 || n > len(buf) {
				t.Fatalf("n = %d of %d", n, len(buf))
			}
			if ok {
				if !utf8ValidOrBinary(&m) {
					t.Fatalf("invalid UTF-8 text delivered: %q", m.Payload)
				}
				if !m.Opcode.IsControl() && int64(len(m.Payload)) > norm.MaxWSMessageBytes {
					t.Fatalf("message of %d bytes over %d", len(m.Payload), norm.MaxWSMessageBytes)
				}
				if m.Opcode.IsControl() && len(m.Payload) > WSMaxControlPayload {
					t.Fatalf("control frame of %d bytes", len(m.Payload))
				}
				if m.Opcode == WSClose && len(m.Payload) >= 2 && binary.BigEndian.Uint16(m.Payload) != m.CloseCode {
					t.Fatalf("close code %d vs payload %q", m.CloseCode, m.Payload)
				}
			}
			buf = buf[n:]
		}
		for _, k := range splitPoints(len(data)) {
			if got := readAll(t, cfg, data, k); !slicesEqual(got, want) {
				t.Fatalf("split at %d:\n%q\nwhole:\n%q", k, got, want)
			}
		}
		if len(data) <= 400 {
			cuts := make([]int, len(data))
			for i := range cuts {
				cuts[i] = i
			}
			if got := readAll(t, cfg, data, cuts...); !slicesEqual(got, want) {
				t.Fatalf("byte by byte:\n%q\nwhole:\n%q", got, want)
			}
		}
	})
}

// FuzzWSDifferential runs client byte streams through gorilla/websocket's
// server and WSReader (see wsDiffOne).
func FuzzWSDifferential(f *testing.F) {
	addWSSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, sel uint8) {
		if len(data) == 0 {
			return
		}
		wsDiffOne(t, data, []int64{1 << 16, 20, 130}[int(sel)%3])
	})
}
