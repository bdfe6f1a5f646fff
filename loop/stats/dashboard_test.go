package stats

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readFrame reads Server-Sent Events from r until a frame (an unnamed event).
func readFrame(t *testing.T, r *bufio.Reader) dashFrame {
	t.Helper()
	_, data := nextEvent(t, r, "")
	var f dashFrame
	require.NoError(t, json.Unmarshal(data, &f), string(data))
	return f
}

// nextEvent reads Server-Sent Events from r until one named name ("" for unnamed),
// skipping comments and other events, and returns its name and data.
func nextEvent(t *testing.T, r *bufio.Reader, name string) (string, []byte) {
	t.Helper()
	event := ""
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			event = ""
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == name:
			return event, []byte(strings.TrimPrefix(line, "data: "))
		}
	}
}

// The dashboard page and its event stream, on the server (HandleStats) and on an admin
// listener (StatsHandler): the page is the embedded HTML, the stream sends frames with
// the loop, routes, tasks, offload and admission sections and a growing history.
func TestDashboardEvents(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv, addr := startServer(t, m.cfg(loop.Config{}), func(s *loop.Server) {
				Mount(s, "/debug/baton")
				s.Handle("GET /hello", func(c *loop.Ctx) { c.String(200, "hi") })
			})
			admin := httptest.NewServer(http.StripPrefix("/admin", Handler(srv)))
			defer admin.Close()
			cl := &http.Client{Timeout: 10 * time.Second}
			for _, base := range []string{"http://" + addr + "/debug/baton", admin.URL + "/admin"} {
				resp, err := cl.Get(base + "/")
				require.NoError(t, err)
				page, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
				assert.Contains(t, string(page), `new EventSource("events")`)

				resp, err = cl.Get("http://" + addr + "/hello")
				require.NoError(t, err)
				resp.Body.Close()

				resp, err = cl.Get(base + "/events")
				require.NoError(t, err)
				assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
				r := bufio.NewReader(resp.Body)
				f := readFrame(t, r)
				require.Nil(t, f.Stall)
				require.NotEmpty(t, f.Loop)
				assert.Contains(t, string(f.Routes), `"GET /hello"`)
				assert.Contains(t, string(f.Tasks), `"live_count"`)
				require.NotNil(t, f.Offload)
				require.NotNil(t, f.Admission)
				assert.Positive(t, f.Admission.Parsed)
				assert.NotContains(t, f.Panels, "rooms", "no feature added its section")
				assert.Nil(t, f.Panels["websockets"], "no WebSocket panel before the first upgrade")
				g := readFrame(t, r)
				assert.Greater(t, g.Time, f.Time)
				require.NotNil(t, g.Point)
				assert.Equal(t, g.Time, g.Point.Time)
				resp.Body.Close()
			}
		})
	}
}

// At most MaxStreams streams are open at once; one more is answered 503.
func TestDashboardBoundsSubscribers(t *testing.T) {
	_, addr := startServer(t, loop.Config{}, func(s *loop.Server) { Mount(s, "/debug/baton") })
	cl := &http.Client{Timeout: 10 * time.Second}
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for range MaxStreams {
		resp, err := cl.Get("http://" + addr + "/debug/baton/events")
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		readFrame(t, bufio.NewReader(resp.Body)) // subscribed
		open = append(open, resp)
	}
	resp, err := cl.Get("http://" + addr + "/debug/baton/events")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 503, resp.StatusCode)
}

// While a handler holds the loop, the frames of a stream on an admin listener name it,
// from the stall detector (a stream on the server itself cannot: its writes need the
// loop); once it has finished, the frames list it among the busiest finished tasks.
func TestDashboardNamesAStall(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{})
	srv, addr := startServer(t, loop.Config{StallThreshold: 100 * time.Millisecond}, func(s *loop.Server) {
		s.Handle("GET /stall", func(c *loop.Ctx) {
			close(held)
			select { // holds the loop on purpose, bounded
			case <-release:
			case <-time.After(20 * time.Second):
			}
			c.Bytes(204, "", nil)
		})
	})
	admin := httptest.NewServer(Handler(srv))
	defer admin.Close()
	cl := &http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Get(admin.URL + "/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readFrame(t, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := cl.Get("http://" + addr + "/stall"); err == nil {
			resp.Body.Close()
		}
	}()
	<-held
	for {
		f := readFrame(t, r)
		if f.Stall != nil {
			assert.Equal(t, "GET /stall", f.Stall.Route)
			assert.Positive(t, f.Stall.Elapsed)
			break
		}
	}
	close(release)
	<-done
	for {
		f := readFrame(t, r)
		if f.Stall == nil && strings.Contains(string(f.Tasks), `"GET /stall"`) {
			var tasks struct {
				Finished []struct {
					Route    string  `json:"route"`
					MaxSlice float64 `json:"max_slice_seconds"`
				} `json:"finished"`
			}
			require.NoError(t, json.Unmarshal(f.Tasks, &tasks))
			require.NotEmpty(t, tasks.Finished)
			assert.Equal(t, "GET /stall", tasks.Finished[0].Route, "the busiest finished task")
			assert.GreaterOrEqual(t, tasks.Finished[0].MaxSlice, 1.0)
			break
		}
	}
}
