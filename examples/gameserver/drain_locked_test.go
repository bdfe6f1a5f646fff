package main

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/examples/gameserver/store"
)

// lockDB takes the write lock of the SQLite file at path from another connection (as a
// backup tool or a second process would) and returns the function that releases it.
func lockDB(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE") // the write lock: every other writer gets SQLITE_BUSY
	require.NoError(t, err)
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		_, err := conn.ExecContext(ctx, "ROLLBACK")
		assert.NoError(t, err)
		assert.NoError(t, conn.Close())
		assert.NoError(t, db.Close())
	}
	t.Cleanup(release)
	return release
}

// roomsView is GET /rooms as these tests read it.
type roomsView struct {
	Rooms []struct {
		ID    string `json:"id"`
		Ended bool   `json:"ended"`
	} `json:"rooms"`
	Queued   int   `json:"queued"`
	Recorded int64 `json:"recorded"`
}

func (v roomsView) ended() int {
	n := 0
	for _, r := range v.Rooms {
		if r.Ended {
			n++
		}
	}
	return n
}

// lockedDrainServer starts bot arenas of 300 ms, waits for a first write, takes the
// database's write lock and waits until at least three more matches have finished
// unwritten behind it.
func lockedDrainServer(t *testing.T, drain time.Duration) (*server, options, *syncBuffer, func()) {
	t.Helper()
	opts := testOptions(t.TempDir())
	opts.BotRooms, opts.Match = 3, 300*time.Millisecond
	opts.Drain, opts.DBBusy = drain, 10*time.Second // a write waits out the lock: in flight at the deadline
	logs := &syncBuffer{}
	opts.Log = slog.New(slog.NewTextHandler(logs, nil))
	s := start(t, opts)
	var v roomsView
	require.Eventually(t, func() bool {
		return getJSON(t, s.url("/rooms"), &v) == 200 && v.Recorded >= 1
	}, 20*time.Second, 10*time.Millisecond, "the writer writes")
	release := lockDB(t, opts.DB)
	require.Eventually(t, func() bool {
		return getJSON(t, s.url("/rooms"), &v) == 200 && v.ended()-int(v.Recorded) >= 3
	}, 20*time.Second, 10*time.Millisecond, "matches finish behind the lock")
	return s, opts, logs, release
}

// endedArenas returns the ids of the arenas that ended; read after run returned (the
// loop has stopped, so the test goroutine may read the app).
func endedArenas(t *testing.T, a *app) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for id, ar := range a.arenas {
		require.True(t, ar.ended, "arena %s ended in the drain", id)
		ids[id] = true
	}
	return ids
}

// inDB returns which of ids the database file holds.
func inDB(t *testing.T, path string, ids map[string]bool) map[string]bool {
	t.Helper()
	st, err := store.Open(path)
	require.NoError(t, err)
	defer st.Close()
	got := map[string]bool{}
	for id := range ids {
		_, ok, err := st.MatchScores(context.Background(), id)
		require.NoError(t, err)
		if ok {
			got[id] = true
		}
	}
	return got
}

var unwrittenRe = regexp.MustCompile(`unwritten=(\d+)`)

func loggedUnwritten(t *testing.T, logs string) int {
	t.Helper()
	m := unwrittenRe.FindStringSubmatch(logs)
	require.NotNil(t, m, "the stop line says unwritten=; logs:\n%s", logs)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// TestDrainWaitsOutALockedDatabase: the database is locked by another connection while
// matches finish and SIGTERM comes; the lock is released once the drain has begun, well
// before its deadline. Every finished match is written and the log says unwritten=0.
func TestDrainWaitsOutALockedDatabase(t *testing.T) {
	s, opts, logs, release := lockedDrainServer(t, 8*time.Second)
	stopped := make(chan error, 1)
	go func() { stopped <- s.stop() }()
	require.Eventually(t, func() bool { // the drain began: the admin address's readiness fails
		resp, err := http.Get("http://" + s.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 503
	}, 10*time.Second, 5*time.Millisecond)
	release()
	require.NoError(t, <-stopped, "the drain wrote everything before its deadline")

	ended := endedArenas(t, s.app)
	written := inDB(t, opts.DB, ended)
	assert.Equal(t, ended, written, "every finished match is in the database")
	assert.Equal(t, 0, loggedUnwritten(t, logs.String()))
	assert.Empty(t, s.app.backlog)
}

// TestDrainCountsUnwrittenMatchesHonestly: the lock outlives the drain's deadline. The
// matches that could not be written stay in the backlog, the error and the log's
// unwritten= give their true number (the matches that finished and are not in the
// file once the lock is gone), and none is counted as written that is not.
func TestDrainCountsUnwrittenMatchesHonestly(t *testing.T) {
	s, opts, logs, release := lockedDrainServer(t, 1500*time.Millisecond)
	err := s.stop()
	release()
	require.Error(t, err, "the drain could not write everything")

	ended := endedArenas(t, s.app)
	written := inDB(t, opts.DB, ended)
	missing := len(ended) - len(written)
	require.GreaterOrEqual(t, missing, 3, "the matches that finished behind the lock are not in the file")
	assert.Equal(t, missing, loggedUnwritten(t, logs.String()), "the log's unwritten= is the true count; logs:\n%s", logs.String())
	assert.ErrorContains(t, err, strconv.Itoa(missing)+" finished matches were not written")
	assert.Equal(t, int64(len(written)), s.app.recorded.Load(), "matches_recorded counts what is in the file")
	kept := map[string]bool{}
	for _, f := range s.app.backlog {
		kept[f.Result.Match] = true
	}
	for id := range ended {
		assert.True(t, written[id] != kept[id], "match %s is either written or still in the backlog (written %v, kept %v)", id, written[id], kept[id])
	}
}
