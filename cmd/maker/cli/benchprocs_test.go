package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// bench --processes refuses, before anything starts, the flags of the
// other measurements and its own flags without it. (e2e
// TestBenchProcesses runs it: it needs the built maker binary.)
func TestBenchProcessesFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--processes", "--jobs", "2"},
		{"--processes", "--floor"},
		{"--processes", "--runs", "2"},
		{"--processes", "--redis", "redis://127.0.0.1:1/0"},
		{"--processes", "--cpuprofile", "x.pprof"},
		{"--processes", "--task", "multiply"},
		{"--processes", "--mem-every", "0s"},
		{"--processes", "--reference-disks", "-1"},
		{"--processes", "--voters", "0"},
		{"--processes", "--nats-server-bin", "/nonexistent/nats-server"},
		{"--mem-every", "1s"},
		{"--cpuprofile-dir", "profiles"},
	} {
		if res := runMain(t, append([]string{"bench"}, args...)...); res.code != ExitUsage {
			t.Errorf("bench %v: exit %d, want %d; stderr:\n%s", args, res.code, ExitUsage, res.stderr)
		}
	}
}

func TestFindNATSServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe := filepath.Join(dir, "maker")
	beside := filepath.Join(dir, "nats-server")
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findNATSServer("", exe); err != nil || got != beside {
		t.Errorf("beside maker: %q, %v; want %q", got, err, beside)
	}
	if got, err := findNATSServer(beside, "/elsewhere/maker"); err != nil || got != beside {
		t.Errorf("--nats-server-bin: %q, %v", got, err)
	}
	if _, err := findNATSServer(filepath.Join(dir, "missing"), exe); err == nil {
		t.Error("a --nats-server-bin that does not exist was taken")
	}
}

// The simulated model of a fleet of processes is the one bench's flags
// describe, flag for flag.
func TestSimllmArgs(t *testing.T) {
	t.Parallel()
	sf := simFlags{accuracy: 0.9978, malformed: 0.01, latency: 2 * time.Millisecond, wrongSpread: 1, hardSteps: "0.01:0.6"}
	got := sf.simllmArgs(7)
	want := []string{"--accuracy", "0.9978", "--seed", "7", "--malformed-rate", "0.01", "--latency", "2ms", "--wrong-spread", "1", "--hard-steps", "0.01:0.6"}
	if !slices.Equal(got, want) {
		t.Errorf("simllmArgs = %v, want %v", got, want)
	}
	// Each is a flag maker simllm takes.
	res := runMain(t, append([]string{"simllm", "--help"}, got...)...)
	for i := 0; i < len(got); i += 2 {
		if !strings.Contains(res.stdout, got[i]+" ") {
			t.Errorf("maker simllm has no %s", got[i])
		}
	}
}
