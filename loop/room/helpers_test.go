package room

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// startServer starts a server on a free loopback port with the routes set by setup and
// shuts it down at the end of the test.
func startServer(t testing.TB, cfg loop.Config, setup func(s *loop.Server)) (*loop.Server, string) {
	t.Helper()
	s := loop.New(looptest.Config(t, cfg))
	if setup != nil {
		setup(s)
	}
	looptest.Start(t, s)
	return s, s.Addr().String()
}

// serveInBackground runs s.ListenAndServe in a goroutine, waits until s is ready, and
// returns the channel ListenAndServe's result arrives on: for tests that shut the server
// down themselves.
func serveInBackground(t testing.TB, s *loop.Server) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready after 10s")
	}
	return errc
}
