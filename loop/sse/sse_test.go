package sse_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/looptest"
	"github.com/batonrt/baton/loop/sse"
	"github.com/batonrt/baton/loop/stats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, looptest.GoleakOptions()...) }

// event is one parsed event of a stream.
type event struct {
	id, typ, data string
	comment       bool // a comment line (a heartbeat), no fields
	hasData       bool // a data line was read (a later one starts a new line)
}

// client is a raw event-stream client over one connection.
type client struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	resp *http.Response
}

// open connects to addr and asks for path with the extra header lines.
func open(t *testing.T, addr, path string, headers ...string) *client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	req := "GET " + path + " HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	_, err = io.WriteString(conn, req+"\r\n")
	require.NoError(t, err)
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	require.NoError(t, err)
	return &client{t: t, conn: conn, br: bufio.NewReader(resp.Body), resp: resp}
}

// next reads the next event (or comment) of the stream; io.EOF when it ended.
func (c *client) next() (event, error) {
	var ev event
	seen := false
	for {
		line, err := c.br.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if seen {
				ev.hasData = false // parsing state, not a field of the event
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			ev.comment, seen = true, true
		case strings.HasPrefix(line, "id: "):
			ev.id, seen = line[4:], true
		case strings.HasPrefix(line, "event: "):
			ev.typ, seen = line[7:], true
		case strings.HasPrefix(line, "data: "):
			if ev.data != "" || ev.hasData {
				ev.data += "\n"
			}
			ev.data += line[6:]
			ev.hasData, seen = true, true
		}
		// Other lines ("retry: ...", the reconnection delay) are not events.
	}
}

// must reads the next event, failing the test on error.
func (c *client) must() event {
	c.t.Helper()
	ev, err := c.next()
	require.NoError(c.t, err)
	return ev
}

// start serves a broker at /events (and the stats pages) and returns the server, the
// broker and the server's address.
func start(t *testing.T, lc loop.Config, bc sse.Config) (*loop.Server, *sse.Broker, string) {
	t.Helper()
	s := loop.New(looptest.Config(t, lc))
	b, err := sse.New(s, bc)
	require.NoError(t, err)
	s.Handle("GET /events", b.Serve)
	stats.Mount(s, "/debug/baton")
	looptest.Start(t, s)
	return s, b, s.Addr().String()
}

// figures reads the broker named name from the stats page.
func figures(t *testing.T, addr, name string) sse.BrokerFigures {
	t.Helper()
	resp, body := looptest.Dial(t, addr).Get("/debug/baton/sse")
	require.Equal(t, 200, resp.StatusCode, body)
	var f sse.Figures
	require.NoError(t, json.Unmarshal([]byte(body), &f), body)
	for _, r := range f.Brokers {
		if r.Name == name {
			return r
		}
	}
	return sse.BrokerFigures{}
}

// waitClients waits until the broker has n clients.
func waitClients(t *testing.T, addr, name string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return figures(t, addr, name).Clients == n }, 10*time.Second, 5*time.Millisecond)
}

// TestEventsReachEveryClient: two clients get every event published after they connected,
// in order, with ids counting up, a type, and multi-line data as several data lines; the
// answer is text/event-stream, not cached. Both modes.
func TestEventsReachEveryClient(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			_, b, addr := start(t, loop.Config{MultiThread: mt}, sse.Config{Name: "scores"})
			b.Publish(sse.Event{Data: "before anyone listened"})
			a, c := open(t, addr, "/events"), open(t, addr, "/events")
			for _, cl := range []*client{a, c} {
				assert.Equal(t, 200, cl.resp.StatusCode)
				assert.Equal(t, "text/event-stream; charset=utf-8", cl.resp.Header.Get("Content-Type"))
				assert.Equal(t, "no-store", cl.resp.Header.Get("Cache-Control"))
			}
			waitClients(t, addr, "scores", 2)
			assert.EqualValues(t, 2, b.Publish(sse.Event{Type: "goal", Data: "alice"}))
			b.Publish(sse.Event{Data: "line one\nline two"})
			b.Publish(sse.Event{Type: "goal", Data: "bob"})
			for _, cl := range []*client{a, c} {
				assert.Equal(t, event{id: "2", typ: "goal", data: "alice"}, cl.must())
				assert.Equal(t, event{id: "3", data: "line one\nline two"}, cl.must())
				assert.Equal(t, event{id: "4", typ: "goal", data: "bob"}, cl.must())
			}
			f := figures(t, addr, "scores")
			assert.EqualValues(t, 4, f.Events)
			assert.EqualValues(t, 6, f.Sent, "three events to each of two clients")
			assert.EqualValues(t, 2, f.Served)
		})
	}
}

// TestLastEventIDResumes: a client that reconnects with Last-Event-ID gets the events it
// missed (from the history) and then the live ones; one that asks for events older than
// the history gets what is left, counted as a gap.
func TestLastEventIDResumes(t *testing.T) {
	_, b, addr := start(t, loop.Config{}, sse.Config{Name: "feed", History: 3})
	a := open(t, addr, "/events")
	waitClients(t, addr, "feed", 1)
	b.Publish(sse.Event{Data: "one"})
	b.Publish(sse.Event{Data: "two"})
	assert.Equal(t, "1", a.must().id)
	assert.Equal(t, "2", a.must().id)
	require.NoError(t, a.conn.Close())
	waitClients(t, addr, "feed", 0)
	b.Publish(sse.Event{Data: "three"})
	b.Publish(sse.Event{Data: "four"})

	r := open(t, addr, "/events", "Last-Event-ID: 2")
	assert.Equal(t, event{id: "3", data: "three"}, r.must())
	assert.Equal(t, event{id: "4", data: "four"}, r.must())
	b.Publish(sse.Event{Data: "five"})
	assert.Equal(t, event{id: "5", data: "five"}, r.must())
	f := figures(t, addr, "feed")
	assert.EqualValues(t, 1, f.Resumed)
	assert.EqualValues(t, 2, f.Replayed)
	assert.Zero(t, f.Gaps)

	// The query parameter serves a first connection that cannot set headers; the history
	// holds 3 events (3, 4, 5): asking from 0 loses 1 and 2.
	q := open(t, addr, "/events?lastEventId=0")
	for _, want := range []string{"3", "4", "5"} {
		assert.Equal(t, want, q.must().id)
	}
	assert.EqualValues(t, 1, figures(t, addr, "feed").Gaps)
}

// TestHeartbeatOnAQuietStream: a stream with no events gets a comment line every
// Heartbeat, so that proxies keep it open.
func TestHeartbeatOnAQuietStream(t *testing.T) {
	_, _, addr := start(t, loop.Config{}, sse.Config{Name: "quiet", Heartbeat: 20 * time.Millisecond})
	c := open(t, addr, "/events")
	for range 3 {
		assert.Equal(t, event{comment: true}, c.must())
	}
	assert.GreaterOrEqual(t, figures(t, addr, "quiet").Heartbeats, int64(3))
}

// TestDrainEndsStreamsWithFinalEvent: Shutdown ends every open stream with the final event
// (after the events published before it), the stream then ends, and the drain does not
// wait for the clients to leave. Both modes.
func TestDrainEndsStreamsWithFinalEvent(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			s := loop.New(looptest.Config(t, loop.Config{MultiThread: mt}))
			b, err := sse.New(s, sse.Config{Name: "match"})
			require.NoError(t, err)
			s.Handle("GET /events", b.Serve)
			errc := make(chan error, 1)
			go func() { errc <- s.ListenAndServe() }()
			<-s.Ready()
			addr := s.Addr().String()
			cls := []*client{open(t, addr, "/events"), open(t, addr, "/events")}
			require.Eventually(t, func() bool {
				snap, err := stats.Take(context.Background(), s, stats.ViewSections)
				if err != nil {
					return false
				}
				f, _ := snap.Sections["sse"].(sse.Figures)
				return len(f.Brokers) == 1 && f.Brokers[0].Clients == 2
			}, 10*time.Second, 5*time.Millisecond)
			b.Publish(sse.Event{Type: "state", Data: "final score 3:1"})
			for _, c := range cls {
				assert.Equal(t, event{id: "1", typ: "state", data: "final score 3:1"}, c.must())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			began := time.Now()
			require.NoError(t, s.Shutdown(ctx), "the streams end: nothing holds the drain")
			assert.Less(t, time.Since(began), 5*time.Second)
			require.ErrorIs(t, <-errc, loop.ErrServerClosed)
			for _, c := range cls {
				assert.Equal(t, event{id: "1", typ: "close", data: "draining"}, c.must())
				_, err := c.next()
				assert.ErrorIs(t, err, io.EOF, "the stream ends after the final event")
			}
		})
	}
}

// TestConfigValidate names the field and its value.
func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  sse.Config
		want string
	}{
		{sse.Config{}, "sse: Config.Name is empty"},
		{sse.Config{Name: "a", FinalEvent: "x\ny"}, `sse: Config.FinalEvent ("x\ny")`},
		{sse.Config{Name: "a", Heartbeat: time.Microsecond}, "sse: Config.Heartbeat (1µs)"},
	} {
		err := c.cfg.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
		_, err = sse.New(loop.New(loop.Config{}), c.cfg)
		assert.Error(t, err, "New refuses what Validate refuses")
	}
	require.NoError(t, sse.Config{Name: "a", Heartbeat: -1, History: -1, Retry: -1}.Validate())
}
