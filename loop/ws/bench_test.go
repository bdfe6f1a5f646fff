package ws

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"

	"github.com/stretchr/testify/require"
)

// wsBenchFrame is a masked client text frame of n bytes (n < 126).
func wsBenchFrame(n int) []byte {
	return append([]byte{0x81, 0x80 | byte(n)}, maskBytes([]byte{9, 8, 7, 6}, bytes.Repeat([]byte("a"), n))...)
}

// BenchmarkWSEcho measures a 100-byte text message from a raw client echoed by a handler
// in the task form (ReadMessage, WriteText) or the callback form (OnMessage, WriteText),
// window messages in flight at a time; ns/op and allocs/op are per message, the client's
// side included (it allocates nothing).
func BenchmarkWSEcho(b *testing.B) {
	for _, window := range []int{1, 64} {
		for _, form := range []string{"task", "callback"} {
			b.Run("window="+strconv.Itoa(window)+"/form="+form, func(b *testing.B) { benchWSEcho(b, form, window) })
		}
	}
}

func benchWSEcho(b *testing.B, form string, window int) {
	h := wsEcho(nil)
	if form == "callback" {
		h = wsCallbackEcho(nil)
	}
	_, addr := startServer(b, loop.Config{}, func(s *loop.Server) { s.Handle("GET /ws", h) })
	rc := wsRawDial(b, addr, "/ws")
	frame := wsBenchFrame(100)
	batch := bytes.Repeat(frame, window)
	echo := make([]byte, 102*window)
	_ = rc.c.SetDeadline(time.Now().Add(time.Minute))
	b.SetBytes(100)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += window {
		n := min(window, b.N-done)
		if _, err := rc.c.Write(batch[:n*len(frame)]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(rc.br, echo[:n*102]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWSBroadcast measures Broadcast of a 200-byte prepared message to 100
// connections whose clients read as fast as they can; ns/op and allocs/op are per
// delivered message (the handler yields after each round so the output is written).
func BenchmarkWSBroadcast(b *testing.B) {
	const members = 100
	var room []*Conn
	joined := make(chan struct{}, members)
	_, addr := startServer(b, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /member", func(c *loop.Ctx) {
			w, err := Upgrade(c, opts(c, Config{}))
			if err != nil {
				return
			}
			room = append(room, w)
			joined <- struct{}{}
			for {
				if _, _, err := w.ReadMessage(); err != nil {
					return
				}
			}
		})
		s.Handle("GET /tick", func(c *loop.Ctx) {
			n, _ := strconv.Atoi(c.Query("n"))
			m := NewPrepared(true, make([]byte, 200))
			for range n {
				if Broadcast(m, room) != members {
					c.String(500, "a member left\n")
					return
				}
				_ = c.Sleep(0)
			}
			c.String(200, "ok\n")
		})
	})
	for range members {
		rc := wsRawDial(b, addr, "/member")
		go func() { _, _ = io.Copy(io.Discard, rc.br) }()
		<-joined
	}
	b.ReportAllocs()
	b.ResetTimer()
	n := max(b.N/members, 1)
	resp, err := http.Get("http://" + addr + "/tick?n=" + strconv.Itoa(n))
	require.NoError(b, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(b, 200, resp.StatusCode, string(body))
}

// BenchmarkWSSend measures Send alone, per recipient: a 200-byte prepared message
// appended to 100 connections' output. Only the Broadcast calls are timed: the output is
// then written (RawConn.Flush) outside the timing, and the clients read it (the write
// syscalls are BenchmarkWSBroadcast's).
func BenchmarkWSSend(b *testing.B) {
	const members = 100
	var room []*Conn
	joined := make(chan struct{}, members)
	elapsed := make(chan time.Duration, 1)
	_, addr := startServer(b, loop.Config{}, func(s *loop.Server) {
		s.Handle("GET /member", func(c *loop.Ctx) {
			w, err := Upgrade(c, opts(c, Config{}))
			if err != nil {
				return
			}
			room = append(room, w)
			joined <- struct{}{}
			for {
				if _, _, err := w.ReadMessage(); err != nil {
					return
				}
			}
		})
		s.Handle("GET /tick", func(c *loop.Ctx) {
			n, _ := strconv.Atoi(c.Query("n"))
			m := NewPrepared(true, make([]byte, 200))
			var spent time.Duration
			for range n {
				start := time.Now()
				sent := Broadcast(m, room)
				spent += time.Since(start)
				if sent != members {
					c.String(500, "a member left\n")
					return
				}
				for _, w := range room {
					w.rc.Flush(-1)
				}
			}
			elapsed <- spent
			c.String(200, "ok\n")
		})
	})
	for range members {
		r := wsRawDial(b, addr, "/member")
		go func() { _, _ = io.Copy(io.Discard, r.br) }()
		<-joined
	}
	b.ReportAllocs()
	b.ResetTimer()
	n := max(b.N/members, 1)
	resp, err := http.Get("http://" + addr + "/tick?n=" + strconv.Itoa(n))
	require.NoError(b, err)
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(b, 200, resp.StatusCode)
	b.StopTimer()
	b.ReportMetric(float64(<-elapsed)/float64(n*members), "ns/send")
}
