package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// The tests run real etcd servers: Debian's etcd-server package (etcd 3.4) or any etcd
// binary on PATH or in $ETCD_BIN, as child processes on loopback ports with data in a
// temporary directory. Where none can start, the tests skip and say why.

// etcdBinary returns the etcd binary's path, or skips the test.
func etcdBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("ETCD_BIN"); p != "" {
		return p
	}
	for _, p := range []string{"etcd", "/usr/bin/etcd", "/usr/local/bin/etcd"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Skip("no etcd binary (install Debian's etcd-server: apt-get install -y etcd-server, or set ETCD_BIN); the etcd directory tests need a real etcd")
	return ""
}

// member is one etcd server process.
type member struct {
	name      string
	dir       string // data directory
	clientURL string
	peerURL   string
	args      []string
	log       string // the process's output file
	cmd       *exec.Cmd
	exited    chan struct{} // closed when cmd has been waited for
}

// cluster is a set of etcd members started together.
type cluster struct {
	t       testing.TB
	bin     string
	members []*member
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	ports := make([]int, n)
	ls := make([]net.Listener, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls[i] = l
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// startCluster starts an etcd cluster of n members on loopback and waits until it has a
// leader; it skips the test if etcd cannot start (after three tries on fresh ports) and
// stops the members at the end of the test. Elections are short (heartbeat 50 ms,
// election timeout 500 ms) so that a lost leader is replaced quickly and a lease of 1 s
// can be granted.
func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	bin := etcdBinary(t)
	var lastErr error
	for try := range 3 {
		c := &cluster{t: t, bin: bin}
		ports := freePorts(t, 2*n)
		var initial []string
		for i := range n {
			m := &member{
				name:      fmt.Sprintf("m%d", i),
				dir:       filepath.Join(t.TempDir(), "data"),
				clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
				peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			}
			m.log = filepath.Join(filepath.Dir(m.dir), "etcd.log")
			initial = append(initial, m.name+"="+m.peerURL)
			c.members = append(c.members, m)
		}
		for _, m := range c.members {
			m.args = []string{
				"--name", m.name, "--data-dir", m.dir,
				"--listen-client-urls", m.clientURL, "--advertise-client-urls", m.clientURL,
				"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
				"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
				"--initial-cluster-token", fmt.Sprintf("baton-test-%d-%d", os.Getpid(), try),
				"--heartbeat-interval", "50", "--election-timeout", "500",
				"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
			}
		}
		t.Cleanup(c.stopAll)
		for _, m := range c.members {
			if lastErr = c.start(m); lastErr != nil {
				break
			}
		}
		if lastErr == nil {
			if lastErr = c.waitHealthy(15 * time.Second); lastErr == nil {
				return c
			}
		}
		c.stopAll()
	}
	t.Skipf("etcd (%s) could not start on loopback: %v", bin, lastErr)
	return nil
}

// start starts m's process (again, after a stop, on its data directory and ports).
func (c *cluster) start(m *member) error {
	f, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, m.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	m.cmd = cmd
	m.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(m.exited)
	}()
	return nil
}

// kill stops m with SIGKILL and waits for it to exit.
func (c *cluster) kill(m *member) {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
	m.cmd = nil
}

func (c *cluster) stopAll() {
	for _, m := range c.members {
		c.kill(m)
	}
	if c.t.Failed() {
		for _, m := range c.members {
			if b, err := os.ReadFile(m.log); err == nil {
				c.t.Logf("etcd %s log (last 2000 bytes):\n%s", m.name, tail(b, 2000))
			}
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// healthy reports whether m answers /health with a leader.
func healthy(m *member) bool {
	cl := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := cl.Get(m.clientURL + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"true"`)
}

// waitHealthy waits until every running member is healthy.
func (c *cluster) waitHealthy(limit time.Duration) error {
	end := time.Now().Add(limit)
	for {
		ok := true
		for _, m := range c.members {
			if m.cmd == nil {
				continue
			}
			select {
			case <-m.exited:
				return fmt.Errorf("etcd %s exited: %s", m.name, tail(readFile(m.log), 1000))
			default:
			}
			if !healthy(m) {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(end) {
			return errors.New("etcd not healthy after " + limit.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFile(p string) []byte {
	b, _ := os.ReadFile(p)
	return b
}

func (c *cluster) endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientURL
	}
	return out
}

// leader returns the member that is the cluster's leader.
func (c *cluster) leader(ctx context.Context, cli *clientv3.Client) (*member, error) {
	for _, m := range c.members {
		if m.cmd == nil {
			continue
		}
		st, err := cli.Status(ctx, m.clientURL)
		if err != nil {
			continue
		}
		if st.Header.MemberId == st.Leader {
			return m, nil
		}
	}
	return nil, errors.New("no leader found")
}

// client returns an etcd client of the cluster, closed at the end of the test. It
// reconnects at most 250 ms apart (gRPC's default backoff grows to two minutes), so that
// the tests see etcd come back promptly.
func (c *cluster) client(t testing.TB) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.endpoints(),
		DialTimeout: 2 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
		Logger: zap.NewNop(), // the outage tests would fill the output with reconnection warnings
	})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return cli
}
