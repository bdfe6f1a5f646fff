package loop

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/batonrt/baton/httpcodec"
)

// Defaults used where a Config field is zero.
const (
	// DefaultAddr is the listen address when Config.Addr is empty: loopback, so that a server
	// started without configuration is not exposed to the network by accident.
	DefaultAddr = "127.0.0.1:8080"

	// DefaultReadHeaderTimeout bounds the time from the first byte of a request head to its
	// end, so a client trickling header bytes (slowloris) cannot hold a connection for long.
	// Ten seconds is generous for any real client on a slow mobile link.
	DefaultReadHeaderTimeout = 10 * time.Second

	// DefaultIdleTimeout bounds how long a keep-alive connection may wait for its next
	// request. Idle connections cost little memory here, so the bound is long: two minutes
	// outlasts the keep-alive timeouts of common clients and load balancers (60 s), which
	// should be the side that closes first.
	DefaultIdleTimeout = 2 * time.Minute

	// DefaultLingerTimeout bounds how long a connection that is being closed by the server
	// keeps reading (and discarding) client bytes after its last response, so that the
	// kernel does not answer unread bytes with a reset that could destroy that response.
	DefaultLingerTimeout = 2 * time.Second
)

// Config configures a Server. Its zero value is ready to use; each field documents its
// default and unit. A Config is read once by New and not retained.
type Config struct {
	// Addr is the TCP address to listen on, as "host:port". Default DefaultAddr.
	// Port 0 picks a free port; Server.Addr reports it once the server is ready.
	Addr string

	// LockOSThread locks the loop goroutine to its OS thread. Default false: on the
	// machines measured so far it made every wake-up from another goroutine (offload
	// results, timers, Post) far slower while mutual exclusion does not need it.
	LockOSThread bool

	// ReadHeaderTimeout is the longest time from the first byte of a request head to its
	// end; past it the client gets 408 and the connection closes. Zero means
	// DefaultReadHeaderTimeout; negative means no limit.
	ReadHeaderTimeout time.Duration

	// IdleTimeout is the longest time a keep-alive connection may wait for the first byte
	// of its next request before the server closes it. Zero means DefaultIdleTimeout;
	// negative means no limit.
	IdleTimeout time.Duration

	// LingerTimeout is how long a connection the server is closing keeps draining client
	// bytes after its last response. Zero means DefaultLingerTimeout; negative means the
	// connection closes as soon as its output is written.
	LingerTimeout time.Duration

	// Limits bounds request parsing (request line, header section, body size). Its zero
	// value gives httpcodec's documented defaults.
	Limits httpcodec.Config

	// Logger receives the server's logs (handler panics, timeouts, gnet errors).
	// Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns a copy of c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.LingerTimeout == 0 {
		c.LingerTimeout = DefaultLingerTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first invalid field of c, naming it. The zero Config is valid.
// Safe for concurrent use.
func (c Config) Validate() error {
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			return fmt.Errorf("loop: Config.Addr %q: %w", c.Addr, err)
		}
	}
	if c.Limits.MaxRequestLineBytes < 0 {
		return fmt.Errorf("loop: Config.Limits.MaxRequestLineBytes must not be negative, got %d", c.Limits.MaxRequestLineBytes)
	}
	if c.Limits.MaxHeaderBytes < 0 {
		return fmt.Errorf("loop: Config.Limits.MaxHeaderBytes must not be negative, got %d", c.Limits.MaxHeaderBytes)
	}
	if c.Limits.MaxHeaderCount < 0 {
		return fmt.Errorf("loop: Config.Limits.MaxHeaderCount must not be negative, got %d", c.Limits.MaxHeaderCount)
	}
	if c.Limits.MaxBodyBytes < 0 {
		return fmt.Errorf("loop: Config.Limits.MaxBodyBytes must not be negative, got %d", c.Limits.MaxBodyBytes)
	}
	return nil
}
