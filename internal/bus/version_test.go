package bus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// TestCheckServerVersion: servers older than the minimum, or whose
// version cannot be read, are refused with an error naming the minimum.
func TestCheckServerVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{"2.11.0", true},
		{"v2.11.0", true},
		{"2.11.0-RC.1", true},
		{"2.11.9", true},
		{"2.12.1", true},
		{"2.15.2", true},
		{"3.0.0", true},
		{"2.10.29", false},
		{"2.9.10", false},
		{"v2.9.25+build", false},
		{"1.99.99", false},
		{"", false},
		{"2.11", false},
		{"two.eleven.zero", false},
	} {
		err := bus.CheckServerVersion(tc.version)
		if tc.ok != (err == nil) {
			t.Errorf("CheckServerVersion(%q) = %v, want ok %v", tc.version, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, bus.ErrServerVersion) || !strings.Contains(err.Error(), bus.MinServerVersion)) {
			t.Errorf("CheckServerVersion(%q) = %v, want ErrServerVersion naming %s", tc.version, err, bus.MinServerVersion)
		}
	}
}

// TestOldServerRefused (issue 9, finding 9): a role started against
// nats-server 2.9 (Debian's package, when installed) is refused at start
// with the minimum named, and creates nothing; the in-process server of
// the tests is accepted.
func TestOldServerRefused(t *testing.T) {
	t.Parallel()
	bin := "/usr/sbin/nats-server"
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no %s: %v", bin, err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Skipf("%s --version: %v", bin, err)
	}
	version := strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "nats-server:")), "v")
	if bus.CheckServerVersion(version) == nil {
		t.Skipf("%s is %s, not older than %s", bin, version, bus.MinServerVersion)
	}
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	})
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	testkit.Eventually(t, 10*time.Second, func() bool {
		nc, err = nats.Connect(url)
		return err == nil
	}, "nats-server %s does not accept connections: %v", version, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for name, start := range map[string]func() error{
		"Ensure":      func() error { _, err := topology.Ensure(ctx, js, topology.Config{}); return err },
		"Open":        func() error { _, err := topology.Open(ctx, js, topology.Config{}); return err },
		"EnsureJudge": func() error { _, err := topology.EnsureJudge(ctx, js, topology.JudgeConfig{}); return err },
		"OpenJudge":   func() error { _, err := topology.OpenJudge(ctx, js, topology.JudgeConfig{}); return err },
	} {
		err := start()
		if !errors.Is(err, bus.ErrServerVersion) || !strings.Contains(err.Error(), bus.MinServerVersion) || !strings.Contains(err.Error(), version) {
			t.Errorf("%s on nats-server %s: %v; want ErrServerVersion naming both versions", name, version, err)
		}
	}
	names := js.StreamNames(ctx)
	var streams []string
	for n := range names.Name() {
		streams = append(streams, n)
	}
	if len(streams) != 0 {
		t.Errorf("a refused start created streams %v", streams)
	}
}
