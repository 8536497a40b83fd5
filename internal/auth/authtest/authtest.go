// Package authtest starts what the tests of secured fleets run against: a
// real in-process nats-server (JetStream on, random port, temporary store)
// configured the way an operator would, by including the auth.conf that
// `maker auth init` wrote, and connections on the identities it made,
// which remember the permission violations the server reports.
package authtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/bus"
)

// Server is a running nats-server with the authorization of an auth dir.
type Server struct {
	Server *server.Server
	URL    string
	// Dir holds the identities' seeds and auth.conf.
	Dir string
}

// Start runs auth.Init in a temporary directory and a nats-server whose
// configuration file includes its auth.conf.
func Start(tb testing.TB) *Server {
	tb.Helper()
	dir := tb.TempDir()
	if _, err := auth.Init(auth.InitConfig{Dir: dir}); err != nil {
		tb.Fatal(err)
	}
	return StartConf(tb, dir, "include ./"+auth.ConfigFile+"\n")
}

// StartConf runs a nats-server from a configuration file in dir made of
// a listener on a random loopback port, JetStream with a store in dir,
// and extra (nats-server.conf syntax, paths relative to dir).
func StartConf(tb testing.TB, dir, extra string) *Server {
	tb.Helper()
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\nserver_name: authtest\njetstream {\n  store_dir: %q\n}\n%s",
		filepath.Join(dir, "jetstream"), extra)
	path := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		tb.Fatalf("nats-server config: %v\n%s", err, conf)
	}
	// AUTHTEST_LOG=1 shows the server's log (permission violations too).
	opts.NoSigs, opts.NoLog = true, os.Getenv("AUTHTEST_LOG") == ""
	ns, err := server.NewServer(opts)
	if err != nil {
		tb.Fatal(err)
	}
	if !opts.NoLog {
		ns.ConfigureLogger()
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		tb.Fatal("nats-server not ready after 10s")
	}
	tb.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return &Server{Server: ns, URL: ns.ClientURL(), Dir: dir}
}

// Seed is the seed file of identity.
func (s *Server) Seed(identity string) string { return filepath.Join(s.Dir, identity+auth.SeedExt) }

// Conn is a connection on one identity.
type Conn struct {
	*nats.Conn
	Identity string

	mu         sync.Mutex
	violations []error
	changed    chan struct{} // closed and replaced at each violation
}

// Violations returns the permission violations the server reported so far.
func (c *Conn) Violations() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.violations...)
}

// WaitViolation waits up to timeout for a violation whose text contains
// subject, and returns it (nil when none came).
func (c *Conn) WaitViolation(subject string, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		for _, v := range c.violations {
			if strings.Contains(v.Error(), " "+subject) {
				c.mu.Unlock()
				return v
			}
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return nil
		}
	}
}

// Connect connects as identity with its seed, closed at cleanup.
func (s *Server) Connect(tb testing.TB, identity string) *Conn {
	tb.Helper()
	c := &Conn{Identity: identity, changed: make(chan struct{})}
	nc, err := bus.Connect(s.URL, "authtest-"+identity, bus.Auth{NKey: s.Seed(identity), OnViolation: func(err error) {
		c.mu.Lock()
		c.violations = append(c.violations, err)
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}})
	if err != nil {
		tb.Fatalf("connect as %s: %v", identity, err)
	}
	tb.Cleanup(nc.Close)
	c.Conn = nc
	return c
}
