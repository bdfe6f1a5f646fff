package main

import (
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"

	"github.com/batonrt/baton/examples/newcomer/internal/apptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNewcomer runs the app over real sockets (apptest.Check: auth, the database call in a
// span, the lobby's broadcasts to two players, metrics).
func TestNewcomer(t *testing.T) {
	tp, spans := apptest.Tracer(t)
	public, admin := newServer(t.Context(), tp)
	pub, adm := httptest.NewServer(public), httptest.NewServer(admin)
	defer pub.Close()
	defer adm.Close()
	apptest.Check(t, apptest.App{Public: pub.URL, Admin: adm.URL, Spans: spans, RequestsTotal: "http_requests_total"})
}
