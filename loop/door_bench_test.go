package loop

import (
	"context"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/batonrt/baton/offload"
)

// BenchmarkPostRoundTrip measures the door's wake latency: a goroutine posts a function
// to an idle loop and waits for it to signal back over a channel, one post at a time, so
// every post starts a batch and wakes the loop from epoll. ns/op is the round trip's wall
// time; cpu-ns/op the process's user+system CPU per round trip.
func BenchmarkPostRoundTrip(b *testing.B) {
	s, _ := startServer(b, Config{}, nil)
	back := make(chan struct{})
	fn := func() { back <- struct{}{} }
	for range 1000 { // warm up
		if err := s.Loop(0).Post(fn); err != nil {
			b.Fatal(err)
		}
		<-back
	}
	b.ReportAllocs()
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for range b.N {
		if err := s.Loop(0).Post(fn); err != nil {
			b.Fatal(err)
		}
		<-back
	}
	b.StopTimer()
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkYieldRequest measures a request whose handler yields once before answering
// (one connection, one request at a time): the rest of the handler runs from the pump
// that the control socket's byte brings, so it measures the pump's path through epoll.
// allocs/op and cpu-ns/req as in BenchmarkOffloadDo.
func BenchmarkYieldRequest(b *testing.B) {
	_, addr := startServer(b, Config{}, func(s *Server) {
		s.Handle("GET /", func(c *Ctx) {
			_ = c.Sleep(0)
			c.String(200, "Hello, World!")
		})
	})
	pc := newPlainClient(b, addr, 1, 1)
	defer pc.close()
	pc.run(b, 1000) // warm up
	b.ReportAllocs()
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	elapsed := pc.run(b, b.N)
	b.StopTimer()
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/req")
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/req")
}

// BenchmarkOffloadDoParallel is BenchmarkOffloadDo's offloading handler under load: 8 or
// 64 connections, each with one request at a time, so workers finish calls while the loop
// is busy with other connections and their resumes reach a loop that is awake, or has a
// wake on its way already. ns/req is wall time per request; cpu-ns/req the process's CPU
// per request (client included).
func BenchmarkOffloadDoParallel(b *testing.B) {
	nop := func(context.Context) (int, error) { return 0, nil }
	for _, conns := range []int{8, 64} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			_, addr := startServer(b, Config{}, func(s *Server) {
				s.Handle("GET /", func(c *Ctx) {
					if _, err := offload.Do(c, nop); err != nil {
						c.String(500, err.Error())
						return
					}
					c.String(200, "Hello, World!")
				})
			})
			pc := newPlainClient(b, addr, conns, 1)
			defer pc.close()
			pc.run(b, 2000) // warm up
			b.ReportAllocs()
			var ru0, ru1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			elapsed := pc.run(b, b.N)
			b.StopTimer()
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/req")
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/req")
		})
	}
}
