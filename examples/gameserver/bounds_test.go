package main

import (
	"database/sql"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clientFrom returns an HTTP client whose connections leave from the loopback address ip
// (any of 127.0.0.0/8 on Linux): one client address per bot of a flood.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 10 * time.Second}
}

// flood posts n tickets with fresh player ids from client and counts the answers by
// status; every 429 and 503 must carry a Retry-After of whole seconds. Any goroutine.
func flood(t *testing.T, s *server, client *http.Client, prefix string, n int) map[int]int {
	t.Helper()
	codes := map[int]int{}
	for i := range n {
		resp, err := client.Post(s.url("/tickets?player="+prefix+strconv.Itoa(i)), "", nil)
		if !assert.NoError(t, err) {
			return codes
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
		if resp.StatusCode == 429 || resp.StatusCode == 503 {
			secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			assert.NoError(t, err, "Retry-After on %d", resp.StatusCode)
			assert.GreaterOrEqual(t, secs, 1)
		}
	}
	return codes
}

// liveRooms reads GET /rooms: running arenas and queued tickets. Any goroutine.
func liveRooms(t *testing.T, s *server) (live, queued int) {
	t.Helper()
	resp, err := http.Get(s.url("/rooms"))
	if !assert.NoError(t, err) {
		return 0, 0
	}
	defer resp.Body.Close()
	var v roomsView
	assert.Equal(t, 200, resp.StatusCode)
	assert.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	return len(v.Rooms) - v.ended(), v.Queued
}

// TestTicketFloodFromOneAddress: one client makes 200 tickets with fresh player ids (the
// old limiter was keyed by the id, so each one passed). Past the address's burst they get
// 429, and the queue holds no more than the burst.
func TestTicketFloodFromOneAddress(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Size, opts.Wait = defaultAddrBurst+1, time.Hour // nothing leaves the queue
	s := start(t, opts)
	codes := flood(t, s, clientFrom("127.0.0.1"), "fresh", 200)
	t.Logf("answers: %v", codes)
	assert.Equal(t, defaultAddrBurst, codes[201], "the address's burst, then 429")
	assert.Equal(t, 200-defaultAddrBurst, codes[429])
	_, queued := liveRooms(t, s)
	assert.Equal(t, defaultAddrBurst, queued)
}

// TestTicketFloodIsCapped: 40 client addresses of 127.0.0.0/8 each make 6 tickets with
// fresh ids (within their own burst) while matches of 2 form every 100 ms and last 30 s.
// Past 3 live matches the tickets wait, past 8 queued they get 503 with Retry-After, and
// neither figure ever passes its cap while the flood runs.
func TestTicketFloodIsCapped(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Size, opts.Wait, opts.Match = 2, 100*time.Millisecond, 30*time.Second // no match ends during the flood
	opts.MaxQueued, opts.MaxArenas = 8, 3
	s := start(t, opts)

	var (
		mu     sync.Mutex
		codes  = map[int]int{}
		wg     sync.WaitGroup
		done   = make(chan struct{})
		sample sync.WaitGroup
	)
	maxLive, maxQueued := 0, 0
	sample.Add(1)
	go func() { // GET /rooms all along the flood
		defer sample.Done()
		for {
			live, queued := liveRooms(t, s)
			maxLive, maxQueued = max(maxLive, live), max(maxQueued, queued)
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := flood(t, s, clientFrom("127.0.1."+strconv.Itoa(i+1)), "bot"+strconv.Itoa(i)+"-", 6)
			mu.Lock()
			for k, v := range c {
				codes[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(done)
	sample.Wait()
	t.Logf("answers %v; during the flood: live matches max %d, queued max %d", codes, maxLive, maxQueued)
	assert.Positive(t, codes[503], "past the caps the flood gets 503")
	assert.Zero(t, codes[429], "each address stayed within its burst")
	assert.LessOrEqual(t, maxLive, opts.MaxArenas)
	assert.LessOrEqual(t, maxQueued, opts.MaxQueued)
	var live, queued int
	require.Eventually(t, func() bool { // the matchmaker's next turns fill the matches up to the cap
		live, queued = liveRooms(t, s)
		return live == opts.MaxArenas
	}, 10*time.Second, 10*time.Millisecond, "the matches run at the cap")
	assert.Equal(t, codes[201], live*opts.Size+queued, "every accepted ticket is in a match or queued")
	assert.LessOrEqual(t, queued, opts.MaxQueued)
}

// TestUnplayedPlayersAreForgotten: a flood's made-up player ids leave no rows behind.
// Ten tickets with matches of four: eight play two matches, two stay queued, expire, and
// their profiles (never a match finished) are deleted after PlayerTTL; the eight who
// played keep theirs.
func TestUnplayedPlayersAreForgotten(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Size, opts.Wait, opts.Match = 4, time.Hour, 300*time.Millisecond
	opts.TicketAge, opts.PlayerTTL = 500*time.Millisecond, time.Second
	s := start(t, opts)
	codes := flood(t, s, clientFrom("127.0.2.1"), "junk", 10)
	require.Equal(t, 10, codes[201])
	players := func() int { // the file's rows, as another process sees them
		db, err := sql.Open("sqlite", "file:"+opts.DB+"?_pragma=busy_timeout(5000)")
		require.NoError(t, err)
		defer db.Close()
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM players`).Scan(&n))
		return n
	}
	require.Equal(t, 10, players(), "each accepted ticket saved a profile")
	require.Eventually(t, func() bool { _, q := liveRooms(t, s); return q == 0 }, 10*time.Second, 20*time.Millisecond,
		"the two tickets left expire")
	require.Eventually(t, func() bool { return players() == 8 }, 10*time.Second, 50*time.Millisecond,
		"the unplayed profiles are deleted (%d left)", players())
	var p json.RawMessage
	assert.Equal(t, 200, getJSON(t, s.url("/players/junk0"), &p), "a player who played keeps her profile")
	assert.Equal(t, 404, getJSON(t, s.url("/players/junk8"), &p))
	assert.Equal(t, 404, getJSON(t, s.url("/players/junk9"), &p))
}
