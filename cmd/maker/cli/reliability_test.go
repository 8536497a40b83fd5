package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestRunReliabilityFlags: bad --reliability-target, --k-floor,
// --decorrelate, --decorrelate-temperature and --models values are usage
// errors (exit 2) naming the flag, before anything runs.
func TestRunReliabilityFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--reliability-target", "1"}, "--reliability-target 1 must be in (0, 1)"},
		{[]string{"--reliability-target", "0"}, "--reliability-target 0 must be in (0, 1)"},
		{[]string{"--reliability-target", "NaN"}, "--reliability-target NaN"},
		{[]string{"--reliability-target", "+Inf"}, "--reliability-target +Inf"},
		{[]string{"--k-floor", "2"}, "--k-floor needs --reliability-target"},
		{[]string{"--reliability-target", "0.9", "--k-floor", "0"}, "--k-floor 0 must be between 1 and --max-samples (100)"},
		{[]string{"--decorrelate", "sometimes"}, `--decorrelate "sometimes"`},
		{[]string{"--decorrelate-temperature", "3"}, "--decorrelate-temperature 3 must be in (0, 2]"},
		{[]string{"--decorrelate-temperature", "NaN"}, "--decorrelate-temperature NaN"},
		{[]string{"--models", "a,,b"}, "--models"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			out := runMain(t, append([]string{"run", "--disks", "3", "--k", "2"}, tc.args...)...)
			if out.code != 2 || !strings.Contains(out.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 naming %q", out.code, out.stderr, tc.want)
			}
		})
	}
}

// TestRunReliabilityTarget: maker run --reliability-target runs adaptive
// k: the report's receipt holds p̂ with its interval, the k schedule and
// the bound achieved, and the text report shows them.
func TestRunReliabilityTarget(t *testing.T) {
	t.Parallel()
	args := []string{"run", "--disks", "6", "--sim-accuracy", "0.9", "--sim-wrong-spread", "1", "--seed", "3",
		"--reliability-target", "0.9", "--k-floor", "2", "--json"}
	out := runMain(t, args...)
	if out.code != 0 {
		t.Fatalf("maker %v: exit %d: %s", args, out.code, out.stderr)
	}
	var rep schemas.JobReport
	if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out.stdout)
	}
	rc := rep.Receipt
	if rc == nil || rc.Target != 0.9 || rc.KFloor != 2 || len(rc.KSchedule) == 0 || !(rc.PLow <= rc.PHat && rc.PHat <= rc.PHigh) ||
		rc.BoundSteps+rc.OtherSteps != rep.Steps {
		t.Fatalf("receipt %+v: want the target, the floor, a schedule and an interval covering every step", rc)
	}
	text := runMain(t, "run", "--disks", "3", "--k", "2", "--reliability-target", "0.9")
	if text.code != 0 || !strings.Contains(text.stdout, "reliability      p̂") || !strings.Contains(text.stdout, "(target 0.9)") {
		t.Errorf("text report (exit %d) does not show the receipt:\n%s\n%s", text.code, text.stdout, text.stderr)
	}
}
