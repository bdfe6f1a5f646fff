package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batonrt/baton/offload"
)

// shardOf answers each request with the index of the shard that ran it.
func shardOf(c *Ctx) { c.String(200, strconv.Itoa(c.Loop().Index())) }

func TestShardsServeConcurrently(t *testing.T) {
	const shards = 4
	var arrived atomic.Int32
	s, addr := startServer(t, Config{Shards: shards}, func(s *Server) {
		s.Handle("GET /shard", shardOf)
		// /spin holds its shard's loop (no park) until two /spin requests have arrived:
		// only a second loop can run the second one meanwhile.
		s.Handle("GET /spin", func(c *Ctx) {
			arrived.Add(1)
			deadline := time.Now().Add(10 * time.Second)
			for arrived.Load() < 2 && time.Now().Before(deadline) {
			}
			c.String(200, fmt.Sprintf("%d met=%v", c.Loop().Index(), arrived.Load() >= 2))
		})
	})
	require.Equal(t, shards, s.loopCount())

	// The kernel hashes each connection's addresses to one of the shards' sockets.
	byShard := map[int]*client{}
	for i := 0; i < 64; i++ {
		c := dial(t, addr)
		resp, body := c.get("/shard")
		require.Equal(t, 200, resp.StatusCode)
		k, err := strconv.Atoi(body)
		require.NoError(t, err, "body %q", body)
		require.True(t, k >= 0 && k < shards, "shard %d", k)
		if byShard[k] == nil {
			byShard[k] = c
		}
	}
	// 64 connections all on one of 4 shards: probability 4^-63.
	require.Greater(t, len(byShard), 1, "every connection landed on one shard")

	var two []*client
	var want []string
	for k, c := range byShard {
		if len(two) < 2 {
			two = append(two, c)
			want = append(want, fmt.Sprintf("%d met=true", k))
		}
	}
	for _, c := range two {
		c.send("GET /spin HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	var got []string
	for _, c := range two {
		resp, body := c.read("GET")
		require.Equal(t, 200, resp.StatusCode)
		got = append(got, body)
	}
	assert.Equal(t, want, got, "both shards ran their /spin at the same time")
}

func TestShardStateIsPerShardWithoutLocks(t *testing.T) {
	const shards, clients, perClient = 3, 8, 50
	counts := make([]map[string]int, shards) // counts[i] is touched by shard i's loop only
	for i := range counts {
		counts[i] = map[string]int{}
	}
	s, addr := startServer(t, Config{Shards: shards}, func(s *Server) {
		s.Handle("GET /hit/{key}", func(c *Ctx) {
			m := counts[c.Loop().Index()]
			m[c.PathValue("key")]++
			_ = c.Sleep(0) // another request of this shard runs between the read and the answer
			c.String(200, strconv.Itoa(m[c.PathValue("key")]))
		})
	})
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, addr)
			for j := 0; j < perClient; j++ {
				c.send(fmt.Sprintf("GET /hit/k%d HTTP/1.1\r\nHost: x\r\n\r\n", j%5))
				resp, _, err := c.tryRead("GET")
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, 200, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	total := 0
	for i := 0; i < shards; i++ {
		done := make(chan int)
		require.NoError(t, s.Loop(i).Post(func() { // read each map on its own loop
			n := 0
			for _, v := range counts[i] {
				n += v
			}
			done <- n
		}))
		total += <-done
	}
	assert.Equal(t, clients*perClient, total)
}

func TestShardCrossPostsArriveInOrder(t *testing.T) {
	const shards, n = 3, 10000
	seqs := make([][]int, shards) // seqs[i]: appended on shard i's loop only
	finished := make(chan int, 1)
	_, addr := startServer(t, Config{Shards: shards}, func(s *Server) {
		s.Handle("GET /send", func(c *Ctx) {
			to := (c.Loop().Index() + 1) % shards
			for i := 1; i <= n; i++ {
				if err := s.Loop(to).Post(func() {
					seqs[to] = append(seqs[to], i)
					if i == n {
						finished <- to
					}
				}); err != nil {
					c.String(500, err.Error())
					return
				}
			}
			c.String(200, strconv.Itoa(to))
		})
	})
	resp, body := dial(t, addr).get("/send")
	require.Equal(t, 200, resp.StatusCode, body)
	to := <-finished
	assert.Equal(t, body, strconv.Itoa(to))
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	assert.Equal(t, want, seqs[to], "posts from one task run in order")
}

func TestShardsShutdownDrainsEveryShard(t *testing.T) {
	const shards, conns = 3, 60
	var started [shards]atomic.Int32
	var draining [shards]atomic.Bool
	var release atomic.Bool
	s := New(Config{Addr: "127.0.0.1:0", Shards: shards, Logger: quietLogger(t)})
	s.Handle("GET /slow", func(c *Ctx) {
		started[c.Loop().Index()].Add(1)
		for !release.Load() {
			if c.Sleep(time.Millisecond) != nil {
				return
			}
		}
		c.String(200, strconv.Itoa(c.Loop().Index()))
	})
	for i := 0; i < shards; i++ {
		s.Loop(i).OnDrain(func(time.Time) { draining[i].Store(true) })
	}
	errc := serveInBackground(t, s)
	cs := make([]*client, conns)
	for i := range cs {
		cs[i] = dial(t, s.Addr().String())
		cs[i].send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	// 60 connections over 3 shards leave one without any with probability 3·(2/3)^60.
	require.Eventually(t, func() bool {
		n := int32(0)
		for i := range started {
			if started[i].Load() == 0 {
				return false
			}
			n += started[i].Load()
		}
		return n == conns
	}, 10*time.Second, time.Millisecond, "every shard has requests in flight")

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	require.Eventually(t, func() bool {
		for i := range draining {
			if !draining[i].Load() {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "every shard began its drain")
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with requests in flight", err)
	case <-s.Done():
		t.Fatal("ListenAndServe returned with requests in flight")
	default:
	}
	release.Store(true)
	perShard := map[string]int{}
	for _, c := range cs {
		resp, body, err := c.tryRead("GET")
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		perShard[body]++
	}
	assert.Len(t, perShard, shards, "answers came from every shard")
	require.NoError(t, <-shut)
	require.ErrorIs(t, <-errc, ErrServerClosed)
	rep := s.DrainReport()
	assert.Equal(t, conns, rep.InFlight, "the report sums the shards")
	sum := 0
	for i := 0; i < shards; i++ {
		sum += s.Loop(i).srv.drain.report.InFlight // each loop's own report
	}
	assert.Equal(t, conns, sum)
	assert.ErrorIs(t, s.Loop(1).Post(func() {}), ErrServerClosed)
}

func TestShardsConfig(t *testing.T) {
	for _, n := range []int{-1, maxShards + 1} {
		err := Config{Shards: n}.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Config.Shards")
	}
	require.NoError(t, Config{Shards: maxShards}.Validate())
	cfg, err := fromLookup(Config{}, envMap(map[string]string{"BATON_SHARDS": "3"}))
	require.NoError(t, err)
	assert.Equal(t, 3, cfg.Shards)
	_, err = fromLookup(Config{}, envMap(map[string]string{"BATON_SHARDS": "0"}))
	require.ErrorContains(t, err, "BATON_SHARDS")
	_, err = fromLookup(Config{}, envMap(map[string]string{"BATON_DEFAULT_SHARDS": "999"}))
	require.ErrorContains(t, err, "Config.Shards")

	one := New(Config{Logger: quietLogger(t)})
	assert.Equal(t, 1, one.loopCount())
	assert.Equal(t, 0, one.Loop(0).Index())
	assert.Equal(t, 0, one.LoopFor("room-1").Index())
	assert.Panics(t, func() { one.Loop(1) })
	require.NoError(t, one.Close())

	s := New(Config{Shards: 4, Logger: quietLogger(t)})
	assert.Equal(t, 4, s.loopCount())
	assert.Panics(t, func() { s.Loop(4) })
	assert.Panics(t, func() { s.Loop(-1) })
	hit := map[int]bool{}
	for i := 0; i < 100; i++ {
		k := s.LoopFor("room-" + strconv.Itoa(i)).Index()
		require.Equal(t, k, s.LoopFor("room-"+strconv.Itoa(i)).Index(), "stable")
		hit[k] = true
	}
	assert.Len(t, hit, 4, "100 keys reach every shard")
	for i := 0; i < 4; i++ {
		assert.Equal(t, i, s.Loop(i).Index())
		assert.Same(t, s.Loop(i), s.Loop(i).Server().Loop(i))
	}
	// Closed before it started: every shard is stopped, ListenAndServe refuses.
	require.NoError(t, s.Close())
	<-s.Done()
	<-s.Ready()
	assert.ErrorIs(t, s.ListenAndServe(), ErrServerClosed)
	assert.ErrorIs(t, s.Loop(2).Post(func() {}), ErrServerClosed)
}

func TestShardsPortInUse(t *testing.T) {
	// A listener without SO_REUSEPORT holds the port: shard 0 cannot bind, and every
	// shard ends without serving.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	s := New(Config{Addr: ln.Addr().String(), Shards: 3, Logger: quietLogger(t)})
	err = s.ListenAndServe()
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrServerClosed)
	assert.Contains(t, err.Error(), "shard 0")
	<-s.Ready()
	<-s.Done()
	assert.ErrorIs(t, s.Loop(1).Post(func() {}), ErrServerClosed)
	require.NoError(t, s.Close())
}

// getJSON fetches url and decodes its JSON object.
func getJSON(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m), url)
	return resp.StatusCode, m
}

// shardRows returns the "shards" array of a page, checking each row names its shard.
func shardRows(t *testing.T, page map[string]any, n int) []map[string]any {
	t.Helper()
	raw, ok := page["shards"].([]any)
	require.True(t, ok, "page has a shards array: %v", page)
	require.Len(t, raw, n)
	rows := make([]map[string]any, n)
	for i, r := range raw {
		rows[i] = r.(map[string]any)
		require.EqualValues(t, i, rows[i]["shard"])
	}
	return rows
}

func TestShardsShareOneOffloadPool(t *testing.T) {
	for _, mt := range []bool{false, true} {
		t.Run(fmt.Sprintf("multithread=%v", mt), func(t *testing.T) {
			const shards, conns = 3, 30
			s, addr := startServer(t, Config{Shards: shards, MultiThread: mt}, func(s *Server) {
				s.Handle("GET /off", func(c *Ctx) {
					before := c.Loop().Index()
					v, err := offload.Do(c, func(context.Context) (int, error) { return before, nil })
					if err != nil {
						c.String(500, err.Error())
						return
					}
					c.String(200, fmt.Sprintf("%d", v*100+c.Loop().Index())) // resumed on its own shard
				})
				s.HandleStats("/debug/baton")
			})
			for i := 0; i < shards; i++ {
				assert.Same(t, s.pool, s.Loop(i).srv.pool, "one pool for the process")
			}
			for i := 0; i < conns; i++ {
				resp, body := dial(t, addr).get("/off")
				require.Equal(t, 200, resp.StatusCode, body)
				k, err := strconv.Atoi(body)
				require.NoError(t, err)
				assert.Equal(t, k/100, k%100, "the result came back to the shard that offloaded")
			}
			var done uint64
			for _, l := range s.snapshotOffload().Pool.Lanes {
				done += l.Completed
			}
			assert.EqualValues(t, conns, done)

			// The stats pages gather every shard in this mode too.
			code, page := getJSON(t, "http://"+addr+"/debug/baton/offload")
			require.Equal(t, 200, code)
			rows := shardRows(t, page, shards)
			completed := func(pool any) any { // a counter: the pool is read once per row
				return pool.(map[string]any)["lanes"].([]any)[0].(map[string]any)["completed_total"]
			}
			assert.EqualValues(t, conns, completed(page["pool"]))
			assert.EqualValues(t, conns, completed(rows[1]["pool"]), "every shard shows the one pool")
		})
	}
}

// One shard's loop stopping unasked stops the whole server with an error naming the
// shard (a supervisor restarts the process); the other shards drain.
func TestShardEngineStopStopsTheServer(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Shards: 3, Logger: quietLogger(t)})
	var drained [3]atomic.Bool
	for i := 0; i < 3; i++ {
		s.Loop(i).OnDrain(func(time.Time) { drained[i].Store(true) })
	}
	errc := serveInBackground(t, s)
	eng := s.Loop(1).srv.eng.Load()
	require.NotNil(t, eng)
	require.NoError(t, eng.Stop(context.Background())) // as gnet does on a fatal error
	err := <-errc
	require.ErrorIs(t, err, errEngineStopped)
	assert.NotErrorIs(t, err, ErrServerClosed)
	assert.Contains(t, err.Error(), "shard 1")
	assert.True(t, drained[0].Load() && drained[2].Load(), "the other shards drained")
	<-s.Done()
	for i := 0; i < 3; i++ {
		assert.ErrorIs(t, s.Loop(i).Post(func() {}), ErrServerClosed)
	}
	require.NoError(t, s.Shutdown(context.Background()))
	assert.ErrorIs(t, s.ListenAndServe(), ErrServerClosed)
}

// A Shutdown racing ListenAndServe's start stops every shard, and ListenAndServe returns
// ErrServerClosed.
func TestShardsShutdownDuringStart(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0", Shards: 3, Logger: quietLogger(t)})
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe() }()
	require.NoError(t, s.Shutdown(context.Background()))
	require.ErrorIs(t, <-errc, ErrServerClosed)
	<-s.Ready()
	<-s.Done()
	assert.ErrorIs(t, s.ListenAndServe(), ErrServerClosed)
}
