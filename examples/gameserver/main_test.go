package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/examples/gameserver/game"
	"github.com/batonrt/baton/examples/gameserver/store"
	"github.com/batonrt/baton/loop"
)

// TestMain runs the real main when asked to (the SIGTERM test starts this binary again as
// the server), and the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv("GAMESERVER_TEST_MAIN") == "1" {
		os.Args = append([]string{"gameserver"}, strings.Fields(os.Getenv("GAMESERVER_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testOptions are small, fast matches on free ports with a database in dir.
func testOptions(dir string) options {
	return options{
		Loop:  loop.Config{Addr: "127.0.0.1:0", RequireSingleThread: true},
		Admin: "127.0.0.1:0", DB: filepath.Join(dir, "data", "gameserver.db"),
		Bots: true, BotRooms: 0, Size: 4, Wait: 10 * time.Second, Match: 2 * time.Second,
	}
}

// server is a gameserver running in the test process.
type server struct {
	running
	stop func() error // Shutdown (as SIGTERM does) and wait for run to return
}

func start(t *testing.T, opts options) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan running, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, opts, io.Discard, func(r running) { up <- r }) }()
	var s server
	select {
	case s.running = <-up:
	case err := <-done:
		cancel()
		require.NoError(t, err, "the server did not start")
		t.Fatal("run returned without starting")
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the server did not start within 30 s")
	}
	var once sync.Once
	var stopErr error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(30 * time.Second):
				stopErr = fmt.Errorf("run did not return within 30 s of the shutdown")
			}
		})
		return stopErr
	}
	t.Cleanup(func() { _ = s.stop() })
	return &s
}

func (s *server) url(path string) string { return "http://" + s.addr + path }

// getJSON reads a JSON answer into v and returns the status.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == 200 {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	}
	return resp.StatusCode
}

// snapshot is a state as the clients read it.
type snapshot struct {
	Room    string `json:"room"`
	Seq     uint64 `json:"seq"`
	Over    bool   `json:"over"`
	Reason  string `json:"reason"`
	Players []struct {
		ID    string  `json:"id"`
		Bot   bool    `json:"bot"`
		X     float64 `json:"x"`
		Y     float64 `json:"y"`
		Score int     `json:"score"`
	} `json:"players"`
	Orbs [][2]float64 `json:"orbs"`
}

type message struct {
	Type       string      `json:"type"`
	Error      string      `json:"error"`
	Assignment *assignment `json:"assignment"`
	State      *snapshot   `json:"state"`
}

// played is what a simulated player saw.
type played struct {
	match  string
	states int
	last   *snapshot // the final state (over), or the last one before the connection closed
	err    error
}

// playOverWS is one simulated player: it connects, waits for its match and steers toward
// the nearest orb after every state until the match is over (or stop is closed).
func playOverWS(addr, player string, stop <-chan struct{}) played {
	var p played
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?player="+player, nil)
	if err != nil {
		if resp != nil {
			err = fmt.Errorf("%w (HTTP %d)", err, resp.StatusCode)
		}
		return played{err: err}
	}
	defer ws.Close()
	seq := 0
	for {
		select {
		case <-stop:
			return p
		default:
		}
		_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		var m message
		if err := ws.ReadJSON(&m); err != nil {
			if p.last == nil || !p.last.Over {
				p.err = err
			}
			return p
		}
		switch m.Type {
		case "assigned":
			p.match = m.Assignment.Match
		case "error":
			p.err = fmt.Errorf("server: %s", m.Error)
			return p
		case "state":
			p.states++
			p.last = m.State
			if m.State.Over {
				return p
			}
			seq++
			dx, dy := steer(m.State, player)
			if err := ws.WriteJSON(map[string]any{"dx": dx, "dy": dy, "seq": seq}); err != nil {
				p.err = err
				return p
			}
		}
	}
}

// steer points a player at the nearest orb.
func steer(s *snapshot, player string) (dx, dy float64) {
	for _, p := range s.Players {
		if p.ID != player {
			continue
		}
		best := math.Inf(1)
		for _, o := range s.Orbs {
			if d := math.Hypot(o[0]-p.X, o[1]-p.Y); d < best && d > 0 {
				best, dx, dy = d, (o[0]-p.X)/d, (o[1]-p.Y)/d
			}
		}
	}
	return dx, dy
}

// recordedScores reads a match's scores from the database file, as another process would.
func recordedScores(t *testing.T, db, match string) (map[game.PlayerID]int, bool) {
	t.Helper()
	st, err := store.Open(db)
	require.NoError(t, err)
	defer st.Close()
	scores, ok, err := st.MatchScores(context.Background(), match)
	require.NoError(t, err)
	return scores, ok
}

// TestPlayersPlayAMatchToTheEnd: four players connect over WebSocket, are matched
// together, play (steering toward orbs) until the match ends on time, and the scores of
// the final state are in SQLite afterwards.
func TestPlayersPlayAMatchToTheEnd(t *testing.T) {
	opts := testOptions(t.TempDir())
	s := start(t, opts)
	const n = 4
	results := make([]played, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = playOverWS(s.addr, "player"+strconv.Itoa(i), nil)
		}()
	}
	wg.Wait()
	match := results[0].match
	require.NotEmpty(t, match)
	final := map[game.PlayerID]int{}
	for i, r := range results {
		require.NoError(t, r.err, "player %d", i)
		assert.Equal(t, match, r.match, "one full group: every player in the same match")
		require.NotNil(t, r.last)
		assert.True(t, r.last.Over, "player %d saw the end", i)
		assert.Equal(t, "time", r.last.Reason)
		assert.Greater(t, r.states, 20, "player %d got the 20 Hz states (2 s match)", i)
		for _, p := range r.last.Players {
			final[game.PlayerID(p.ID)] = p.Score
		}
	}
	require.Len(t, final, n, "no bot joined a full group")
	total := 0
	for _, sc := range final {
		total += sc
	}
	assert.Positive(t, total, "players steering at orbs score")

	require.Eventually(t, func() bool {
		_, ok := recordedScores(t, opts.DB, match)
		return ok
	}, 10*time.Second, 20*time.Millisecond, "the match reaches the database")
	scores, _ := recordedScores(t, opts.DB, match)
	assert.Equal(t, final, scores, "the database holds the final state's scores")

	var lb []store.Entry
	require.Equal(t, 200, getJSON(t, s.url("/leaderboard"), &lb))
	assert.Len(t, lb, n)
	require.NoError(t, s.stop())
}

// TestTicketLongPollAndStateFallback: a client without WebSocket queues with POST
// /tickets, long-polls its assignment, reads states with ?since and sends inputs over HTTP.
func TestTicketLongPollAndStateFallback(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Size, opts.Wait = 2, 300*time.Millisecond // one player: a bot fills the match
	s := start(t, opts)
	resp, err := http.Post(s.url("/tickets?player=ann&name=Ann"), "", nil)
	require.NoError(t, err)
	var tk createdJSON
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&tk))
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode)
	require.Equal(t, game.TicketQueued, tk.State)

	var got ticketJSON
	require.Equal(t, 200, getJSON(t, s.url("/tickets/"+tk.ID+"?wait=10"), &got))
	require.Equal(t, game.TicketAssigned, got.State, "the long-poll answers with the assignment")
	require.NotNil(t, got.Assignment)

	var first, next snapshot
	require.Equal(t, 200, getJSON(t, s.url(got.Assignment.State+"?since=0"), &first))
	require.Len(t, first.Players, 2, "ann and a bot")
	require.Equal(t, 200, getJSON(t, s.url(got.Assignment.State+"?since="+strconv.FormatUint(first.Seq, 10)), &next))
	assert.Greater(t, next.Seq, first.Seq, "the long-poll waits for the next tick")

	code, _ := call(t, "POST", s.url(got.Assignment.Input+"?player=ann"), `{"dx":1,"dy":0,"seq":1}`, bearer(tk.Secret))
	assert.Equal(t, 202, code)
	require.NoError(t, s.stop())
}

// TestRateLimits: a client over the ticket limit (per address) or a player over the
// input limit gets 429 with a Retry-After.
func TestRateLimits(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Size, opts.Wait = 1, time.Hour
	s := start(t, opts)
	var codes []int
	var retry string
	var first createdJSON
	for i := range defaultAddrBurst + 3 {
		resp, err := http.Post(s.url("/tickets?player=spammer"+strconv.Itoa(i)), "", nil)
		require.NoError(t, err)
		if i == 0 {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&first))
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == 429 {
			retry = resp.Header.Get("Retry-After")
		}
	}
	assert.Equal(t, 201, codes[0])
	assert.Contains(t, codes, 429, "past the address's burst the tickets are refused: %v", codes)
	secs, err := strconv.Atoi(retry)
	require.NoError(t, err, "Retry-After %q", retry)
	assert.GreaterOrEqual(t, secs, 1)

	// The one-player match started at once (Size 1): flood its input route.
	var tk ticketJSON
	require.Equal(t, 200, getJSON(t, s.url("/tickets/"+first.Ticket.ID+"?wait=10"), &tk))
	require.NotNil(t, tk.Assignment)
	refused := 0
	for range 40 {
		req, err := http.NewRequest("POST", s.url(tk.Assignment.Input+"?player=spammer0"), strings.NewReader(`{"dx":1}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+first.Secret)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		if resp.StatusCode == 429 {
			refused++
			assert.NotEmpty(t, resp.Header.Get("Retry-After"))
		} else {
			assert.Equal(t, 202, resp.StatusCode)
		}
	}
	assert.Positive(t, refused, "past 30 inputs at once the inputs are refused")
	require.NoError(t, s.stop())
}

// TestRestartKeepsLeaderboard: results written before a shutdown are there after a restart.
func TestRestartKeepsLeaderboard(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.BotRooms, opts.Match = 2, 500*time.Millisecond
	s := start(t, opts)
	require.Eventually(t, func() bool { return s.app.recorded.Load() >= 2 }, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, s.stop())
	var before []store.Entry
	st, err := store.Open(opts.DB)
	require.NoError(t, err)
	before, err = st.Leaderboard(context.Background(), 10, true)
	require.NoError(t, err)
	require.NoError(t, st.Close())
	require.NotEmpty(t, before)

	opts.BotRooms = 0 // nothing new gets written
	s2 := start(t, opts)
	var after []store.Entry
	require.Equal(t, 200, getJSON(t, s2.url("/leaderboard?bots=1"), &after))
	assert.Equal(t, before, after)
	require.NoError(t, s2.stop())
}

// TestShutdownDuringPlayLosesNoFinishedMatch: matches finish all the time (bot arenas of
// 300 ms) while a human plays over WebSocket; Shutdown comes in the middle. Every match
// that finished is in the database, the ones in play at the shutdown (cut short with
// reason "shutdown") included, and so is the human's.
func TestShutdownDuringPlayLosesNoFinishedMatch(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.BotRooms, opts.Match = 3, 300*time.Millisecond
	opts.Size, opts.Wait = 2, 100*time.Millisecond
	s := start(t, opts)
	human := make(chan played, 1)
	go func() {
		human <- playOverWS(s.addr, "hero", nil)
	}()
	require.Eventually(t, func() bool { return s.app.recorded.Load() >= 3 }, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, s.stop(), "the drain wrote everything")
	p := <-human
	require.NotEmpty(t, p.match)

	st, err := store.Open(opts.DB)
	require.NoError(t, err)
	defer st.Close()
	n, err := st.Matches(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int(s.app.recorded.Load()), n, "every match recorded in memory is in the file")
	ended := 0
	for id, ar := range s.app.arenas {
		require.True(t, ar.ended, "arena %s ended at the shutdown", id)
		_, ok, err := st.MatchScores(context.Background(), id)
		require.NoError(t, err)
		assert.True(t, ok, "finished match %s is in the database", id)
		ended++
	}
	assert.Equal(t, n, ended, "no other match was recorded")
	scores, ok, err := st.MatchScores(context.Background(), p.match)
	require.NoError(t, err)
	require.True(t, ok, "the human's match, cut short, counts")
	assert.Contains(t, scores, game.PlayerID("hero"))
}

// TestSIGTERMDrainsTheRealProcess starts the real binary (this test binary running main),
// lets bot matches finish, sends SIGTERM and checks that the process exits 0 having
// written every match it ended.
func TestSIGTERMDrainsTheRealProcess(t *testing.T) {
	db := filepath.Join(t.TempDir(), "game.db")
	p := startProcess(t, "-addr 127.0.0.1:0 -admin= -bot-rooms 3 -match 300ms -db "+db)
	var rooms struct {
		Recorded  int `json:"recorded"`
		DBBatches []struct {
			At      int64   `json:"at_unix_ms"`
			Ms      float64 `json:"ms"`
			Matches int     `json:"matches"`
		} `json:"db_batches"`
	}
	require.Eventually(t, func() bool {
		return getJSON(t, "http://"+p.addr+"/rooms", &rooms) == 200 && rooms.Recorded >= 3
	}, 20*time.Second, 20*time.Millisecond)
	require.NotEmpty(t, rooms.DBBatches, "GET /rooms lists the writer's batches")
	matches := 0
	for _, b := range rooms.DBBatches {
		assert.Positive(t, b.At)
		assert.Positive(t, b.Ms)
		matches += b.Matches
	}
	assert.GreaterOrEqual(t, matches, 3, "the batches listed hold the matches recorded")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.cmd.Wait(), "exit status; stderr:\n%s", p.stderr.String())
	assert.Contains(t, p.stderr.String(), "unwritten=0")

	st, err := store.Open(db)
	require.NoError(t, err)
	defer st.Close()
	n, err := st.Matches(context.Background())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, rooms.Recorded+3, "the three arenas in play at SIGTERM count too")
	assert.Contains(t, p.stderr.String(), "matches_recorded="+strconv.Itoa(n))
}

// process is the real server running as a child process (this test binary running main).
type process struct {
	cmd    *exec.Cmd
	addr   string // the game's address
	admin  string // the admin address, when it has one
	stderr *syncBuffer
}

// startProcess starts the server with args (split on spaces) and waits for its URL.
func startProcess(t *testing.T, args string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GAMESERVER_TEST_MAIN=1", "GAMESERVER_TEST_ARGS="+args)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &process{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "gameserver: play at http://"); ok {
			p.addr, _, _ = strings.Cut(rest, "/")
		}
		if rest, ok := strings.CutPrefix(lines.Text(), "gameserver: dashboard at http://"); ok {
			p.admin, _, _ = strings.Cut(rest, "/")
		}
		if strings.HasPrefix(lines.Text(), "gameserver: leaderboard ") { // the line after both
			break
		}
	}
	require.NotEmpty(t, p.addr, "the server printed its URL; stderr:\n%s", p.stderr.String())
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return p
}

// syncBuffer is a strings.Builder safe for the writer goroutine of exec and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBrowserPageAndAdmin: / serves the client, the admin address serves stats and
// health, and the rooms page names the arenas.
func TestBrowserPageAndAdmin(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.BotRooms = 1
	s := start(t, opts)
	resp, err := http.Get(s.url("/"))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(body), "<canvas")
	assert.Contains(t, string(body), `data-path="/debug/baton/rooms?format=text"`)
	assert.Contains(t, string(body), `const admin = "`+s.admin+`"`, "the page's dashboard link points at the admin address")
	// The public port serves no stats page: goroutine stacks (?stacks=1) and the dashboard
	// are the admin address's.
	for _, path := range []string{"/debug/baton/tasks?stacks=1", "/debug/baton/tasks", "/debug/baton/", "/debug/baton/rooms", "/metrics"} {
		resp, err := http.Get(s.url(path))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 404, resp.StatusCode, "GET %s on the game port", path)
	}
	resp, err = http.Get("http://" + s.admin + "/debug/baton/tasks?stacks=1")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(body), "goroutine ", "the admin address shows the stacks")
	assert.NotContains(t, string(body), adminPlaceholder)

	// A spectator (the page before Play) watches the running bot arena.
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+s.addr+"/ws?watch=1", nil)
	require.NoError(t, err)
	var m message
	require.NoError(t, ws.ReadJSON(&m))
	require.Equal(t, "watching", m.Type)
	require.NotNil(t, m.Assignment)
	for range 3 {
		var st message
		require.NoError(t, ws.ReadJSON(&st))
		require.Equal(t, "state", st.Type)
		assert.Equal(t, m.Assignment.Match, st.State.Room)
	}
	require.NoError(t, ws.Close())

	assert.Equal(t, 200, getJSON(t, "http://"+s.admin+"/healthz", nil))
	assert.Equal(t, 200, getJSON(t, "http://"+s.admin+"/debug/baton/tasks", nil))
	resp, err = http.Get("http://" + s.admin + "/debug/baton/")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(body), "<html", "the admin address serves the live dashboard")
	assert.Equal(t, 200, getJSON(t, "http://"+s.admin+"/debug/baton/rooms", nil))
	resp, err = http.Get("http://" + s.admin + "/metrics")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(body), `baton_http_requests_total{`, "the admin address serves Prometheus metrics")
	assert.Contains(t, string(body), `route="GET /ws"`, "per-route series are labelled by pattern")
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + s.admin + "/debug/baton/rooms?format=text")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "arena-") && strings.Contains(string(b), "db-writer")
	}, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, s.stop())
}

func TestParseFlags(t *testing.T) {
	env := map[string]string{"GAMESERVER_DB": "/x/y.db", "BATON_ADDR": ""}
	o, err := parseFlags([]string{"-players", "2"}, func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, "/x/y.db", o.DB)
	assert.Equal(t, "127.0.0.1:8080", o.Loop.Addr)
	assert.Equal(t, "127.0.0.1:8081", o.Admin)
	assert.True(t, o.Bots)
	o, err = parseFlags([]string{"-data", "/d"}, func(string) string { return "" })
	require.NoError(t, err)
	assert.Equal(t, "/d/gameserver.db", o.DB)
	_, err = parseFlags([]string{"-players", "0"}, func(string) string { return "" })
	assert.ErrorContains(t, err, "-players")
	_, err = parseFlags([]string{"-heavy-room", "-bots=false"}, func(string) string { return "" })
	assert.ErrorContains(t, err, "-heavy-room")
	o, err = parseFlags(nil, func(string) string { return "" })
	require.NoError(t, err)
	assert.Equal(t, defaultMaxQueued, o.MaxQueued)
	assert.Equal(t, defaultMaxArenas, o.MaxArenas)
	assert.Equal(t, defaultAddrBurst, o.AddrBurst)
	for _, bad := range [][]string{{"-max-queued", "0"}, {"-max-arenas", "0"}, {"-addr-rate", "0"}, {"-addr-burst", "0"},
		{"-ticket-age", "0s"}, {"-unplayed-ttl", "1s"}} {
		_, err = parseFlags(bad, func(string) string { return "" })
		assert.ErrorContains(t, err, bad[0])
	}
}

// TestTakenAddressFailsFirst starts the real binary on a game (or admin) address another
// process holds: it exits 1 having printed no URL (it printed "play at http://<nil>/"
// before the bind error), and the error names the address and how to pick another.
func TestTakenAddressFailsFirst(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0") // no SO_REUSEPORT: a bind beside it fails
	require.NoError(t, err)
	defer taken.Close()
	for _, tc := range []struct {
		name, args string
		want       []string
	}{
		{"game", "-addr " + taken.Addr().String() + " -admin 127.0.0.1:0",
			[]string{"the game address " + taken.Addr().String() + " is in use", "-addr HOST:PORT", "make run ADDR=HOST:PORT"}},
		{"admin", "-addr 127.0.0.1:0 -admin " + taken.Addr().String(),
			[]string{"the admin address " + taken.Addr().String() + " is in use", "-admin HOST:PORT", "make run ADMIN_ADDR=HOST:PORT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "GAMESERVER_TEST_MAIN=1",
				"GAMESERVER_TEST_ARGS="+tc.args+" -db "+filepath.Join(t.TempDir(), "g.db"))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the process failed; stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			assert.Equal(t, 1, exit.ExitCode())
			assert.NotContains(t, stdout.String(), "play at", "no URL before the error")
			assert.NotContains(t, stdout.String()+stderr.String(), "<nil>")
			for _, w := range tc.want {
				assert.Contains(t, stderr.String(), w)
			}
		})
	}
}
