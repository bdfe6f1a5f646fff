// Package apptest checks an implementation of the newcomer app (examples/newcomer on
// baton, examples/newcomer/stdlib on net/http and chi) over real sockets, so that both are
// held to one test: the bearer token is required, a profile comes from the slow database
// inside a span of its own whose parent is the request's span, two players see each
// other's moves in the lobby's broadcasts, and /metrics counts the requests by route.
package apptest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Tracer returns a tracer provider that records every span in the exporter it returns.
func Tracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return tp, exp
}

// App is a running implementation: its public and admin base URLs ("http://host:port"),
// the exporter its spans go to, and the name of its request counter.
type App struct {
	Public, Admin string
	Spans         *tracetest.InMemoryExporter
	RequestsTotal string
}

// Check runs the newcomer test on app.
func Check(t *testing.T, app App) {
	t.Run("auth", func(t *testing.T) {
		for _, path := range []string{"/profile/7", "/play"} {
			resp, err := http.Get(app.Public + path)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, 401, resp.StatusCode, path)
		}
		_, resp, err := websocket.DefaultDialer.Dial(wsURL(app.Public)+"/play", http.Header{"Authorization": {"Bearer forged"}})
		require.Error(t, err)
		assert.Equal(t, 401, resp.StatusCode)
	})
	t.Run("profile", func(t *testing.T) {
		req, _ := http.NewRequest("GET", app.Public+"/profile/1234", nil)
		req.Header.Set("Authorization", "Bearer alice-token")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, string(body))
		assert.JSONEq(t, `{"id":"1234","level":4}`, string(body))
		var server, db tracetest.SpanStub
		require.Eventually(t, func() bool { // the server span ends after the answer is sent
			for _, s := range app.Spans.GetSpans() {
				switch s.Name {
				case "GET /profile/{id}":
					server = s
				case "db.load":
					db = s
				}
			}
			return server.Name != "" && db.Name != ""
		}, 10*time.Second, time.Millisecond)
		assert.Equal(t, server.SpanContext.TraceID(), db.SpanContext.TraceID())
		assert.Equal(t, server.SpanContext.SpanID(), db.Parent.SpanID(), "db.load's parent is the request's span")
	})
	t.Run("lobby", func(t *testing.T) {
		alice, bob := dial(t, app, "alice-token"), dial(t, app, "bob-token")
		require.NoError(t, alice.WriteMessage(websocket.TextMessage, []byte("move")))
		require.NoError(t, bob.WriteMessage(websocket.TextMessage, []byte("move")))
		for _, c := range []*websocket.Conn{alice, bob} {
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			var last uint64
			for { // the states until both moves are in: each tick's once, in order
				var st struct {
					Tick  uint64         `json:"tick"`
					Moves map[string]int `json:"moves"`
				}
				_, msg, err := c.ReadMessage()
				require.NoError(t, err)
				require.NoError(t, json.Unmarshal(msg, &st), string(msg))
				require.Greater(t, st.Tick, last)
				last = st.Tick
				if st.Moves["alice"] == 1 && st.Moves["bob"] == 1 {
					break
				}
			}
		}
	})
	t.Run("metrics", func(t *testing.T) {
		resp, err := http.Get(app.Admin + "/metrics")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		found := false
		for line := range strings.Lines(string(body)) {
			if strings.HasPrefix(line, app.RequestsTotal+"{") && strings.Contains(line, `route="GET /profile/{id}"`) {
				found = true
			}
		}
		assert.True(t, found, "no %s for GET /profile/{id} in\n%s", app.RequestsTotal, body)
	})
}

func wsURL(base string) string { return "ws" + strings.TrimPrefix(base, "http") }

func dial(t *testing.T, app App, token string) *websocket.Conn {
	c, _, err := websocket.DefaultDialer.Dial(wsURL(app.Public)+"/play", http.Header{"Authorization": {"Bearer " + token}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
