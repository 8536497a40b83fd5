package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/app/fleettest"
)

func TestParseProcStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   string
		want procMem
		err  bool
	}{
		{"both", "Name:\tnats-server\nVmPeak:\t 1000 kB\nVmHWM:\t   2048 kB\nVmRSS:\t   1024 kB\nThreads:\t9\n", procMem{RSS: 1024, HWM: 2048}, false},
		{"zombie", "Name:\tmaker\nState:\tZ (zombie)\nThreads:\t1\n", procMem{}, true},
		{"rss only", "VmRSS:\t 1 kB\n", procMem{}, true},
		{"no unit", "VmRSS:\t 1\nVmHWM:\t 2 kB\n", procMem{}, true},
		{"negative", "VmRSS:\t -1 kB\nVmHWM:\t 2 kB\n", procMem{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStatus([]byte(tc.in))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseProcStatus = %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
	// This process has both lines.
	m, err := readProcMem("self")
	if err != nil || m.RSS <= 0 || m.HWM < m.RSS {
		t.Errorf("readProcMem(self) = %+v, %v", m, err)
	}
}

func TestSlope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		xs, ys []float64
		want   float64
		ok     bool
	}{
		{"line", []float64{0, 1, 2, 3}, []float64{5, 7, 9, 11}, 2, true},
		{"flat", []float64{10, 20, 30}, []float64{4, 4, 4}, 0, true},
		// Scattered points: the least-squares slope, 11/10.
		{"noisy", []float64{0, 1, 2, 3, 4}, []float64{1, -1, 2, 4, 4}, 1.1, true},
		{"two points", []float64{0, 1}, []float64{0, 1}, 0, false},
		{"one x", []float64{3, 3, 3}, []float64{1, 2, 3}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := slope(tc.xs, tc.ys)
			if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("slope = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// The optimal trace computed without a run is the golden one the fleet's
// tests hold runs to.
func TestOptimalTrace(t *testing.T) {
	t.Parallel()
	for disks := 1; disks <= 10; disks++ {
		if got, want := optimalTrace(disks), fleettest.GoldenTrace(disks); got != want {
			t.Errorf("optimalTrace(%d) = %s, golden %s", disks, got, want)
		}
	}
}

// The ready line is found however the output is cut into writes, once,
// and only after it is in the log.
func TestReadyWriter(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	var found [][]string
	w := &readyWriter{file: &log, re: regexp.MustCompile(`listening on (\S+)`)}
	w.found = func(m []string) {
		if !strings.Contains(log.String(), m[0]) {
			t.Errorf("found %q before it was in the log", m[0])
		}
		found = append(found, m)
	}
	out := "starting\nlistening on http://127.0.0.1:1/v1\nlistening on http://other\n"
	for _, chunk := range []string{out[:5], out[5:20], out[20:40], out[40:]} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if len(found) != 1 || found[0][1] != "http://127.0.0.1:1/v1" || log.String() != out {
		t.Errorf("found %q, log %q", found, log.String())
	}
}

// A process that exits before it is ready is an error with its exit and
// the end of its log; one that is ready stops on SIGTERM.
func TestChild(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	c, err := startChild("dies", "/bin/sh", filepath.Join(dir, "dies.log"), childEnv(0), regexp.MustCompile(`never`), "-c", "echo first; echo boom >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	err = c.waitReady(ctx, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "first\nboom") {
		t.Errorf("waitReady: %v", err)
	}
	c, err = startChild("runs", "/bin/sh", filepath.Join(dir, "runs.log"), childEnv(0), regexp.MustCompile(`^up$`), "-c", "echo up; exec sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.waitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	c.stop(time.Minute)
	if c.cmd.ProcessState == nil || c.cmd.ProcessState.Success() {
		t.Errorf("after stop: %v", c.cmd.ProcessState)
	}
	if b, _ := os.ReadFile(c.logPath); string(b) != "up\n" {
		t.Errorf("log %q", b)
	}
}

func TestChildGoMaxProcs(t *testing.T) {
	for _, tc := range []struct {
		name        string
		procs, cpus int
		env         string
		want        int
	}{
		{"six on two CPUs: one thread each", 6, 2, "", 1},
		{"as many as the CPUs: the default", 4, 4, "", 0},
		{"fewer than the CPUs: the default", 4, 16, "", 0},
		{"the environment says", 6, 2, "2", 0},
	} {
		if got := ChildGoMaxProcsFor(tc.procs, tc.cpus, tc.env); got != tc.want {
			t.Errorf("%s: ChildGoMaxProcsFor(%d, %d, %q) = %d, want %d", tc.name, tc.procs, tc.cpus, tc.env, got, tc.want)
		}
	}

	t.Setenv("GOMAXPROCS", "7")
	t.Setenv("MAKER_NATS_URL", "nats://elsewhere:4222")
	count := func(env []string, prefix string) (n int, last string) {
		for _, kv := range env {
			if strings.HasPrefix(kv, prefix) {
				n, last = n+1, kv
			}
		}
		return n, last
	}
	if n, kv := count(childEnv(1), "GOMAXPROCS="); n != 1 || kv != "GOMAXPROCS=1" {
		t.Errorf("childEnv(1): %d GOMAXPROCS, last %q; want only GOMAXPROCS=1", n, kv)
	}
	if n, kv := count(childEnv(0), "GOMAXPROCS="); n != 1 || kv != "GOMAXPROCS=7" {
		t.Errorf("childEnv(0): %d GOMAXPROCS, last %q; want the environment's GOMAXPROCS=7", n, kv)
	}
	if n, _ := count(childEnv(0), "MAKER_"); n != 0 {
		t.Errorf("childEnv keeps %d MAKER_ settings", n)
	}
	if got := effectiveChildGoMaxProcs(0); got != 7 {
		t.Errorf("effectiveChildGoMaxProcs(0) with GOMAXPROCS=7 = %d", got)
	}
	if got := effectiveChildGoMaxProcs(1); got != 1 {
		t.Errorf("effectiveChildGoMaxProcs(1) = %d", got)
	}
}
