// Package testkit starts the real services integration tests run against:
// an in-process nats-server with JetStream and a redis-server on a free
// port (both from internal/app/devserver). Each helper registers its own
// cleanup. It imports no role; the test kits that do, fleettest (a whole
// fleet in a test, a scriptable fake model) and judgetest (judge replicas
// on the simulated model), live in the top layer, internal/app.
package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/internal/app/devserver"
	"github.com/makerfleet/makerfleet/internal/topology"
)

var fallbackNotice sync.Once

// RequireRedisEnv, when "1", turns a missing redis-server into a test
// failure instead of a fallback to miniredis. CI sets it.
const RequireRedisEnv = "MAKER_REQUIRE_REDIS"

// NATS is a running in-process nats-server.
type NATS struct {
	Server *server.Server
	URL    string
}

// StartNATS starts a nats-server with JetStream on a random port and a
// temporary store dir.
func StartNATS(tb testing.TB) *NATS {
	tb.Helper()
	ns, err := devserver.RunNATS(devserver.NATSOptions{StoreDir: tb.TempDir()})
	if err != nil {
		tb.Fatalf("start nats-server: %v", err)
	}
	tb.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return &NATS{Server: ns, URL: ns.ClientURL()}
}

// Redis is a running Redis-compatible server.
type Redis struct {
	Addr string
	// Kind is "redis-server" or "miniredis".
	Kind string
}

// URL returns a redis:// URL for the server.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// Client returns a client the test owns (closed at cleanup).
func (r *Redis) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// StartRedis starts redis-server on a free port with persistence off. When
// redis-server is not installed it falls back to miniredis and says so,
// unless MAKER_REQUIRE_REDIS=1.
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv(RequireRedisEnv) == "1" {
			tb.Fatalf("redis-server not found and %s=1: install it (apt-get install redis-server)", RequireRedisEnv)
		}
		msg := fmt.Sprintf("redis-server not found: tests use the embedded miniredis instead (set %s=1 to make this an error)", RequireRedisEnv)
		tb.Log(msg)
		// Once per test binary on stderr too: `go test` without -v hides
		// t.Log of passing tests, and this must not go unnoticed.
		fallbackNotice.Do(func() { fmt.Fprintln(os.Stderr, "NOTE:", msg) })
		return StartMiniredis(tb)
	}
	p, err := devserver.StartRedis(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return &Redis{Addr: p.Addr, Kind: "redis-server"}
}

// StartMiniredis starts miniredis, for conformance tests that run against
// both servers.
func StartMiniredis(tb testing.TB) *Redis {
	tb.Helper()
	m, err := devserver.RunMiniredis()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(m.Close)
	return &Redis{Addr: m.Addr(), Kind: "miniredis"}
}

// FreePort returns a TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartTopology starts a nats-server (StartNATS), connects a JetStream
// client to it and creates the fleet's topology (memory storage, default
// namespace).
func StartTopology(tb testing.TB) (jetstream.JetStream, *topology.Topology) {
	tb.Helper()
	nc, err := nats.Connect(StartNATS(tb).URL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topo, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage})
	if err != nil {
		tb.Fatal(err)
	}
	return js, topo
}

// Eventually polls cond until it holds, failing the test after timeout.
func Eventually(tb testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("after %s: "+format, append([]any{timeout}, args...)...)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Terminations collects the server's advisories for the messages
// terminated (Term or TermWithReason) on stream's consumer, "*" for any,
// from now on, through nc; the returned function lists those seen so far.
func Terminations(tb testing.TB, nc *nats.Conn, stream, consumer string) func() []server.JSConsumerDeliveryTerminatedAdvisory {
	tb.Helper()
	var (
		mu  sync.Mutex
		got []server.JSConsumerDeliveryTerminatedAdvisory
	)
	sub, err := nc.Subscribe(server.JSAdvisoryConsumerMsgTerminatedPre+"."+stream+"."+consumer, func(m *nats.Msg) {
		var a server.JSConsumerDeliveryTerminatedAdvisory
		if err := json.Unmarshal(m.Data, &a); err != nil {
			return
		}
		mu.Lock()
		got = append(got, a)
		mu.Unlock()
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []server.JSConsumerDeliveryTerminatedAdvisory {
		mu.Lock()
		defer mu.Unlock()
		return append([]server.JSConsumerDeliveryTerminatedAdvisory(nil), got...)
	}
}
