package main

import (
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"

	"github.com/batonrt/baton/examples/newcomer/internal/apptest"
	"github.com/batonrt/baton/loop/looptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// TestNewcomer runs the app over real sockets (apptest.Check: auth, offload in a span,
// the lobby's broadcasts to two players, metrics).
func TestNewcomer(t *testing.T) {
	tp, spans := apptest.Tracer(t)
	srv, admin := newServer("127.0.0.1:0", tp)
	base := looptest.Start(t, srv)
	adm := httptest.NewServer(admin)
	defer adm.Close()
	apptest.Check(t, apptest.App{Public: base, Admin: adm.URL, Spans: spans, RequestsTotal: "baton_http_requests_total"})
}
