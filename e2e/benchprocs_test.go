package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/app/bench"
)

// buildNATSServer builds the nats-server go.mod requires into a
// directory of t's, from the module cache (what make nats-server does).
// It skips only when there is no go tool to build with.
func buildNATSServer(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("maker bench --processes needs a nats-server binary, and there is no go tool to build one: %v", err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "nats-server")
	cmd := exec.Command(goTool, "build", "-o", out, "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build nats-server from the module go.mod requires: %v\n%s", err, b)
	}
	return out
}

// fleetPIDs reads the "pids: name=pid ..." of bench --processes' progress.
var fleetPIDsRE = regexp.MustCompile(`fleet up .*; pids: ([^;]+);`)

func fleetPIDs(stderr string) map[string]int {
	m := fleetPIDsRE.FindStringSubmatch(stderr)
	if m == nil {
		return nil
	}
	pids := map[string]int{}
	for _, f := range strings.Fields(m[1]) {
		name, pid, _ := strings.Cut(f, "=")
		pids[name], _ = strconv.Atoi(pid)
	}
	return pids
}

// checkGone fails unless every process of pids has ended (and been
// reaped: the bench waits for each of its own).
func checkGone(t *testing.T, pids map[string]int) {
	t.Helper()
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) is still there after the bench ended: %v", name, pid, err)
		}
	}
}

// maker bench --processes runs one job on a fleet of separate processes
// and reports every process's memory beside a solved job; it stops every
// process it started when it is interrupted, and a process of the fleet
// that dies fails it with that process's log.
func TestBenchProcesses(t *testing.T) {
	natsBin := buildNATSServer(t)
	wantNames := []string{"nats-server", "redis-server", "simllm", "coordinator-1", "voter-1", "voter-2"}

	t.Run("solved", func(t *testing.T) {
		res := runMaker(t, 3*time.Minute, "bench", "--processes", "--json", "--disks", "5", "--k", "2", "--nats-server-bin", natsBin,
			"--mem-every", "20ms", "--mem-warmup", "0s", "--reference-disks", "3")
		if res.code != 0 {
			t.Fatalf("bench --processes exited %d: %s", res.code, res.stderr)
		}
		parseJSONOnly(t, res.stdout)
		var r bench.ProcessesResult
		if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
			t.Fatal(err)
		}
		if !r.Solved || r.Errors != 0 || !r.TraceOptimal || r.Steps != 31 || r.K != 2 || r.StepsPerSecond <= 0 || r.SamplesPerStep <= 0 {
			t.Errorf("job: solved %v, errors %d, trace optimal %v, steps %d, k %d, steps/s %v, samples/step %v",
				r.Solved, r.Errors, r.TraceOptimal, r.Steps, r.K, r.StepsPerSecond, r.SamplesPerStep)
		}
		if ref := r.Reference; ref == nil || !ref.Solved || ref.Steps != 7 || ref.StepsPerSecond <= 0 {
			t.Errorf("reference: %+v", ref)
		}
		var names []string
		pids := map[string]int{}
		for _, p := range r.Processes {
			names = append(names, p.Name)
			pids[p.Name] = p.PID
			if p.PID <= 0 || p.StartKB <= 0 || p.EndKB <= 0 || p.PeakKB < max(p.StartKB, p.EndKB) {
				t.Errorf("%s: %+v", p.Name, p)
			}
		}
		if !slices.Equal(names, wantNames) {
			t.Errorf("processes %v, want %v", names, wantNames)
		}
		// One sample at the submission and one at the end at least, each
		// with every process.
		if n := len(r.Timeline); n < 2 || r.Timeline[n-1].Steps != 31 || len(r.Timeline[0].RSSKB) != len(wantNames) {
			t.Errorf("timeline: %+v", r.Timeline)
		}
		checkGone(t, pids)
		if r.Dir != "" || strings.Contains(res.stderr, "kept in") {
			t.Errorf("a run that succeeded kept its directory: %q\n%s", r.Dir, res.stderr)
		}
	})

	// Started with a job far longer than the test waits for.
	start := func(t *testing.T) (*proc, map[string]int) {
		p := startProc(t, "bench", "bench", "--processes", "--disks", "16", "--nats-server-bin", natsBin, "--reference-disks", "0")
		var pids map[string]int
		waitFor(t, 2*time.Minute, "the fleet to be up", func() bool {
			pids = fleetPIDs(p.stderr())
			return pids != nil
		}, p)
		if len(pids) != len(wantNames) {
			t.Fatalf("pids %v", pids)
		}
		return p, pids
	}

	t.Run("interrupted", func(t *testing.T) {
		p, pids := start(t)
		p.signal(syscall.SIGINT)
		if code := p.wait(time.Minute); code != 130 {
			t.Errorf("exit %d after SIGINT, want 130; stderr:\n%s", code, p.stderr())
		}
		checkGone(t, pids)
	})

	t.Run("a process dies", func(t *testing.T) {
		p, pids := start(t)
		if err := syscall.Kill(pids["voter-1"], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(time.Minute); code != 1 {
			t.Errorf("exit %d after a voter was killed, want 1", code)
		}
		stderr := p.stderr()
		m := regexp.MustCompile(`(?s)voter-1 \(pid \d+\) exited: signal: killed; the end of its log \((\S+)\):\n.*voter started`).FindStringSubmatch(stderr)
		if m == nil {
			t.Errorf("the error does not name the voter and show its log:\n%s", stderr)
		} else {
			// A failed run's logs are kept, and said where.
			dir := filepath.Dir(m[1])
			if !strings.Contains(stderr, "the fleet's logs are kept in "+dir) {
				t.Errorf("not said where the logs are kept:\n%s", stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, "nats-server.log")); err != nil {
				t.Errorf("logs not kept: %v", err)
			}
			_ = os.RemoveAll(dir)
		}
		checkGone(t, pids)
	})
}
