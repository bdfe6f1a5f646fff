package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/batonrt/baton/loop"
	"github.com/batonrt/baton/loop/health"
	"github.com/batonrt/baton/loop/ws"
)

// The environment that turns this test binary into a baton process of the nginx test
// (TestNginxRollingRestart starts it several times): TestMain runs runNode instead of the
// tests when nodeEnvAddr is set.
const (
	nodeEnvAddr   = "BATON_TEST_NODE_ADDR"   // host:port to listen on
	nodeEnvName   = "BATON_TEST_NODE_NAME"   // instance name put in every answer, e.g. "n1.g2"
	nodeEnvLedger = "BATON_TEST_NODE_LEDGER" // file the ids of answered POSTs are appended to

	// drainReportPrefix starts the line of standard output carrying the process's
	// DrainReport (JSON) once it has drained.
	drainReportPrefix = "drain-report "

	// slowSleep is the shortest sleep GET /inflight counts: the test's slow requests, which
	// it keeps in flight at SIGTERM, sleep slowSleep; the ordinary load sleeps less.
	slowSleep = 600 * time.Millisecond
)

func TestMain(m *testing.M) {
	if os.Getenv(nodeEnvAddr) != "" {
		os.Exit(runNode())
	}
	if os.Getenv(gameEnvNode) != "" {
		os.Exit(runGameNode())
	}
	os.Exit(m.Run())
}

// runNode is the baton server behind nginx in TestNginxRollingRestart, as a production
// game backend would be written (docs/deployment.md): routes, health on the main port, and
// a drain on SIGTERM. Its routes:
//
//   - GET /item?room=R&id=I[&sleep=MS]: idempotent; answers "<instance> <id>", after
//     sleeping MS milliseconds (work in flight when SIGTERM comes);
//   - POST /order?room=R&id=I[&sleep=MS]: not idempotent; sleeps MS milliseconds,
//     appends the id to the ledger file, then answers "<instance> <id>" (the test proves
//     from the ledgers that no POST ran twice, and that none ran unanswered);
//   - GET /ws?room=R: a WebSocket (callback form) that says "hello <instance>", then
//     answers each message m with "<instance> m";
//   - GET /inflight: "<GETs> <POSTs>" sleeping slowSleep or longer in their handlers now
//     (the test waits for some before it sends SIGTERM);
//   - GET /healthz, GET /readyz (package loop/health, mounted on the main port).
//
// On SIGTERM it calls Shutdown with a 10 s deadline: new requests get 503 with
// Retry-After, requests in flight finish, WebSockets get a 1001 close. It then prints its
// DrainReport on standard output and exits 0.
func runNode() int {
	name, ledgerPath := os.Getenv(nodeEnvName), os.Getenv(nodeEnvLedger)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ledger, err := os.OpenFile(ledgerPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		log.Error("node: ledger", "err", err)
		return 2
	}
	defer ledger.Close()

	srv := loop.New(loop.Config{Addr: os.Getenv(nodeEnvAddr), Logger: log})
	checks, err := health.New(srv, health.Config{})
	if err != nil {
		log.Error("node: health", "err", err)
		return 2
	}
	checks.Mount()
	// Handlers sleeping slowSleep or longer now, by method: every handler runs on the loop
	// (single-thread mode), so plain ints.
	var sleepingGets, sleepingPosts int
	srv.Handle("GET /inflight", func(c *loop.Ctx) {
		c.String(200, fmt.Sprintf("%d %d", sleepingGets, sleepingPosts))
	})
	srv.Handle("GET /item", func(c *loop.Ctx) {
		if d := sleepParam(c); d > 0 {
			slow := d >= slowSleep
			if slow {
				sleepingGets++
			}
			err := c.Sleep(d)
			if slow {
				sleepingGets--
			}
			if err != nil {
				return
			}
		}
		c.String(200, name+" "+c.Query("id"))
	})
	srv.Handle("POST /order", func(c *loop.Ctx) {
		id := c.Query("id")
		if d := sleepParam(c); d > 0 {
			slow := d >= slowSleep
			if slow {
				sleepingPosts++
			}
			err := c.Sleep(d)
			if slow {
				sleepingPosts--
			}
			if err != nil {
				return
			}
		}
		// A write to the page cache: microseconds, and it must happen before the answer so
		// that a POST run twice shows in the ledgers even if a process dies after it.
		if _, err := ledger.WriteString(id + "\n"); err != nil {
			c.String(500, "ledger: "+err.Error())
			return
		}
		c.String(200, name+" "+id)
	})
	srv.Handle("GET /ws", func(c *loop.Ctx) {
		conn, err := ws.UpgradeTo(c, ws.Config{}, ws.Handler{
			OnMessage: func(w *ws.Conn, _ bool, data []byte) {
				_ = w.WriteText(append([]byte(name+" "), data...))
			},
		})
		if err != nil {
			return // UpgradeTo answered the client
		}
		_ = conn.WriteText([]byte("hello " + name))
	})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(dctx); err != nil {
			log.Error("node: shutdown", "err", err)
		}
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, loop.ErrServerClosed) {
		log.Error("node: serve", "err", err)
		return 1
	}
	b, _ := json.Marshal(srv.DrainReport())
	fmt.Println(drainReportPrefix + string(b))
	return 0
}

// sleepParam is the request's "sleep" query parameter (milliseconds), 0 if absent.
func sleepParam(c *loop.Ctx) time.Duration {
	ms, _ := strconv.Atoi(c.Query("sleep"))
	return time.Duration(ms) * time.Millisecond
}
