package loop

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkIdleConnMemory holds 10,000 idle keep-alive connections (each served one request
// first) on one loop and reports the server process's resident memory per connection.
// Run: go test -run '^$' -bench IdleConnMemory -benchtime 1x ./loop
func BenchmarkIdleConnMemory(b *testing.B) {
	const n = 10000
	for i := 0; i < b.N; i++ {
		s, _ := startServer(b, Config{}, func(s *Server) {
			s.Handle("GET /", func(c *Ctx) { c.String(200, "Hello, World!") })
		})
		runtime.GC()
		before := rss(b)
		// The clients live in a child process (this test binary again), so that each side
		// needs only n file descriptors and the client's memory stays out of the figure.
		cmd := exec.Command(os.Args[0], "-test.run=^TestIdleClientHelper$")
		cmd.Env = append(os.Environ(), "BATON_IDLE_CLIENT_ADDR="+s.Addr().String(), "BATON_IDLE_CLIENT_N="+strconv.Itoa(n))
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "ready") {
			b.Fatalf("client helper: %q %v", line, err)
		}
		time.Sleep(200 * time.Millisecond)
		runtime.GC()
		after := rss(b)
		open := make(chan int, 1)
		_ = s.Loop(0).Post(func() { open <- len(s.conns.all) })
		if got := <-open; got != n {
			b.Fatalf("%d connections open on the server, want %d", got, n)
		}
		b.ReportMetric(float64(after-before)/n, "rss-bytes/conn")
		_ = stdin.Close()
		_ = cmd.Wait()
	}
}

// TestIdleClientHelper is the client side of BenchmarkIdleConnMemory, run in a child
// process: it opens the connections, has each served one request, reports "ready" and
// holds them until its standard input closes.
func TestIdleClientHelper(t *testing.T) {
	addr := os.Getenv("BATON_IDLE_CLIENT_ADDR")
	if addr == "" {
		t.Skip("only run as BenchmarkIdleConnMemory's client")
	}
	n, _ := strconv.Atoi(os.Getenv("BATON_IDLE_CLIENT_N"))
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrInet4{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To4())
	req := []byte("GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
	buf := make([]byte, 4096)
	fds := make([]int, 0, n)
	for k := 0; k < n; k++ {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
		if err := unix.Connect(fd, sa); err != nil {
			t.Fatalf("connect %d: %v", k, err)
		}
		if _, err := unix.Write(fd, req); err != nil {
			t.Fatal(err)
		}
		for got := 0; !bytes.HasSuffix(buf[:got], []byte("Hello, World!")); {
			m, err := unix.Read(fd, buf[got:])
			if err != nil || m == 0 {
				t.Fatalf("read %d: %v", k, err)
			}
			got += m
		}
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// rss returns the process's resident set size in bytes.
func rss(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := bytes.Fields(v)
			kb, _ := strconv.ParseInt(string(f[0]), 10, 64)
			return kb * 1024
		}
	}
	b.Skip("no VmRSS")
	return 0
}
