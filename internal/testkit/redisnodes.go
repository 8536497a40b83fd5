package testkit

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireRedisTools skips the test when redis-server (or another of the
// given tools, such as redis-cli) is not installed, or fails it when
// MAKER_REQUIRE_REDIS=1: these tests need the real server and have no
// miniredis fallback.
func RequireRedisTools(tb testing.TB, tools ...string) {
	tb.Helper()
	for _, tool := range append([]string{"redis-server"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(RequireRedisEnv) == "1" {
				tb.Fatalf("%s not found and %s=1: install it (apt-get install redis-server)", tool, RequireRedisEnv)
			}
			tb.Skipf("%s not found (set %s=1 to make this an error)", tool, RequireRedisEnv)
		}
	}
}

// RedisNode is a redis-server process a test started: a cluster node, a
// sentinel, a TLS server. It is killed at cleanup.
type RedisNode struct {
	Addr string
	Port int
	Dir  string

	cmd    *exec.Cmd
	exited chan struct{}
	log    *bytes.Buffer
}

// redisNodeConfig says how to start and probe a node.
type redisNodeConfig struct {
	// args returns the command line after the binary for port and dir.
	args func(port int, dir string) []string
	// probe is the client options the readiness ping uses (Addr is set).
	probe redis.Options
}

// startRedisNode starts redis-server and waits until it answers PING,
// retrying on another port when the one it got was taken meanwhile.
func startRedisNode(tb testing.TB, cfg redisNodeConfig) *RedisNode {
	tb.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			tb.Fatal(err)
		}
		dir := tb.TempDir()
		n := &RedisNode{
			Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, Dir: dir,
			exited: make(chan struct{}), log: &bytes.Buffer{},
		}
		n.cmd = exec.Command("redis-server", cfg.args(port, dir)...)
		n.cmd.Dir = dir
		n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
		if err := n.cmd.Start(); err != nil {
			tb.Fatalf("start redis-server: %v", err)
		}
		go func() { _ = n.cmd.Wait(); close(n.exited) }() // owned: ends with the process
		if lastErr = n.waitReady(cfg.probe, 10*time.Second); lastErr == nil {
			tb.Cleanup(n.Kill)
			return n
		}
		n.Kill()
	}
	tb.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

func (n *RedisNode) waitReady(probe redis.Options, timeout time.Duration) error {
	probe.Addr = n.Addr
	probe.MaxRetries = -1
	probe.DialTimeout = 200 * time.Millisecond
	c := redis.NewClient(&probe)
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Ping(ctx).Err()
		if err == nil {
			// The port was free a moment ago: another package's
			// redis-server may have taken it first, and answer for ours,
			// which could not bind and dies. Only our own process will do.
			err = n.isOurs(ctx, c)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-n.exited:
			return fmt.Errorf("redis-server on %s exited: %w; its output:\n%s%s", n.Addr, err, n.log.String(), n.LogTail("redis.log", 10))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s: %w", n.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isOurs reports an error unless the server c reaches is n's process.
func (n *RedisNode) isOurs(ctx context.Context, c *redis.Client) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(n.cmd.Process.Pid)
	for _, line := range strings.Split(info, "\n") {
		if strings.TrimSpace(line) == want {
			return nil
		}
	}
	return fmt.Errorf("another redis-server answers on %s (not pid %d)", n.Addr, n.cmd.Process.Pid)
}

// Kill sends SIGKILL and waits for the process to end. Safe to call twice.
func (n *RedisNode) Kill() {
	_ = n.cmd.Process.Kill()
	<-n.exited
}

// Exited is closed when the process has ended.
func (n *RedisNode) Exited() <-chan struct{} { return n.exited }

// plainArgs are the options every test node shares: loopback only, no
// persistence, logs in its directory.
func plainArgs(port int, dir string) []string {
	return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}
}

// RedisTLS is a redis-server that takes TLS connections only, with ACL
// users: "default" (every right, password AdminPassword) and those the
// test asked for.
type RedisTLS struct {
	*RedisNode
	Files TLSFiles
	// AdminPassword is the default user's password.
	AdminPassword string
}

// StartRedisTLS starts redis-server listening for TLS only (no plain
// port), its certificate signed by a fresh CA (r.Files), clients not
// asked for a certificate. users are ACL rules, one user each, as in
// redis.conf without the word "user" (e.g. "maker on >pw ~maker:* +ping").
func StartRedisTLS(tb testing.TB, users ...string) *RedisTLS {
	tb.Helper()
	RequireRedisTools(tb)
	r := &RedisTLS{Files: WriteTLSFiles(tb), AdminPassword: "admin-test-password"}
	tc, err := r.TLSConfig()
	if err != nil {
		tb.Fatal(err)
	}
	r.RedisNode = startRedisNode(tb, redisNodeConfig{
		args: func(port int, dir string) []string {
			args := plainArgs(port, dir)
			args[1] = "0" // no plain port
			args = append(args, "--tls-port", strconv.Itoa(port),
				"--tls-cert-file", r.Files.ServerCert, "--tls-key-file", r.Files.ServerKey,
				"--tls-ca-cert-file", r.Files.CA, "--tls-auth-clients", "optional",
				"--user", "default", "on", ">"+r.AdminPassword, "~*", "&*", "+@all")
			return append(args, userArgs(users)...)
		},
		probe: redis.Options{Password: r.AdminPassword, TLSConfig: tc},
	})
	return r
}

// TLSConfig trusts the server's CA.
func (r *RedisTLS) TLSConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(r.Files.CA)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	tc.RootCAs = newPool(pem)
	if tc.RootCAs == nil {
		return nil, errors.New("testkit: no CA certificate")
	}
	return tc, nil
}

// userArgs turns ACL users ("NAME on >PASSWORD RULES...") into
// redis-server arguments.
func userArgs(users []string) []string {
	var args []string
	for _, u := range users {
		args = append(args, "--user")
		args = append(args, strings.Fields(u)...)
	}
	return args
}
