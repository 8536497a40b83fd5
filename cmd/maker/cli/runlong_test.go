package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// A run stopped by --timeout cancels its job, prints the job's report so
// far (state cancelled) and exits ExitTimeout; the trace it writes is the
// decided steps', the ones the partial report hashes.
func TestRunTimeoutPrintsPartialReport(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.txt")
	// 16,383 steps at 2 ms a call cannot end within 3 s, even 5 steps
	// sampled at once (speculation).
	res := runMain(t, "run", "-q", "--json", "--disks", "14", "--k", "3", "--sim-accuracy", "0.999", "--seed", "5", "--sim-latency", "2ms",
		"--timeout", "3s", "--trace-file", trace)
	if res.code != ExitTimeout {
		t.Fatalf("exit code %d, want %d (ExitTimeout); stderr:\n%s", res.code, ExitTimeout, res.stderr)
	}
	var rep schemas.JobReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("stdout is not a report: %v\n%s", err, res.stdout)
	}
	if rep.State != schemas.StateCancelled || rep.Steps >= rep.TotalSteps || rep.TotalSteps != 16383 {
		t.Fatalf("report: state %q, %d of %d steps; want cancelled before the end", rep.State, rep.Steps, rep.TotalSteps)
	}
	if rep.Samples < 2*rep.Steps || rep.WallSeconds <= 0 {
		t.Errorf("report figures: %d samples for %d steps, wall %v", rep.Samples, rep.Steps, rep.WallSeconds)
	}
	if !strings.Contains(res.stderr, "--timeout 3s") || !strings.Contains(res.stderr, "partial") {
		t.Errorf("stderr does not say the timeout ended it:\n%s", res.stderr)
	}
	checkTraceFile(t, trace, rep)
}

// --trace-file holds each decided step's vote key on a line, and hashes
// to the report's trace_sha256.
func TestRunTraceFile(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.txt")
	res := runMain(t, "run", "-q", "--json", "--disks", "4", "--seed", "7", "--trace-file", trace)
	if res.code != ExitOK {
		t.Fatalf("exit code %d; stderr:\n%s", res.code, res.stderr)
	}
	var rep schemas.JobReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.State != schemas.StateSolved || rep.Steps != 15 {
		t.Fatalf("report: %s, %d steps", rep.State, rep.Steps)
	}
	checkTraceFile(t, trace, rep)
}

func checkTraceFile(t *testing.T, path string, rep schemas.JobReport) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := int64(bytes.Count(data, []byte("\n"))); n != rep.Steps {
		t.Errorf("trace file has %d lines, the report %d steps", n, rep.Steps)
	}
	if sum := fmt.Sprintf("%x", sha256.Sum256(data)); sum != rep.TraceSHA256 {
		t.Errorf("trace file hashes to %s, the report says %s", sum, rep.TraceSHA256)
	}
}

// maker run keeps its store in a new directory under the temp dir (not
// /dev/shm), removed at the end unless --keep; --mem-every reports the
// process's memory.
func TestRunStoreDir(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			args := []string{"run", "-q", "--disks", "8", "--sim-latency", "2ms", "--mem-every", "20"}
			if keep {
				args = append(args, "--keep")
			}
			// A store a dead run left behind is removed; a kept one is not.
			dead := filepath.Join(tmp, "maker-run-999999999-x")
			kept := filepath.Join(tmp, "maker-run-kept-x")
			for _, d := range []string{dead, kept} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			args = append(args, "--data-dir", "") // the default
			res := runMain(t, args...)
			if _, err := os.Stat(dead); !os.IsNotExist(err) {
				t.Errorf("the dead run's store is still there: %v", err)
			}
			if _, err := os.Stat(kept); err != nil {
				t.Errorf("a kept store was removed: %v", err)
			}
			_ = os.RemoveAll(kept)
			if res.code != ExitOK {
				t.Fatalf("exit code %d; stderr:\n%s", res.code, res.stderr)
			}
			left, _ := filepath.Glob(filepath.Join(tmp, "maker-run-*"))
			if keep != (len(left) == 1) {
				t.Fatalf("--keep %v: %d stores left in the temp dir %v", keep, len(left), left)
			}
			if keep && !strings.Contains(res.stderr, "store is kept in "+left[0]) {
				t.Errorf("stderr does not name the kept store:\n%s", res.stderr)
			}
			if !strings.Contains(res.stderr, "mem: step ") || !strings.Contains(res.stderr, "per 1,000 steps") {
				t.Errorf("no memory figures on stderr:\n%s", res.stderr)
			}
		})
	}
}
