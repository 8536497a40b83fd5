package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestRunSpeculationFlags: bad --speculation-depth and
// --speculation-max-waste values are usage errors (exit 2) that name the
// flag, before anything runs.
func TestRunSpeculationFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--speculation-depth", "-1"}, "--speculation-depth -1"},
		{[]string{"--speculation-depth", "65"}, "--speculation-depth 65"},
		{[]string{"--speculation-depth", "x"}, "speculation-depth"},
		{[]string{"--speculation-depth", "4", "--speculation-max-waste", "0"}, "--speculation-max-waste 0"},
		{[]string{"--speculation-depth", "4", "--speculation-max-waste", "1.5"}, "--speculation-max-waste 1.5"},
		{[]string{"--speculation-depth", "4", "--speculation-max-waste", "NaN"}, "--speculation-max-waste NaN"},
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

// TestRunSpeculation: maker run --speculation-depth decides exactly what
// the same run with --speculation-depth 0 decides (same trace, steps,
// samples) and reports the samples drawn ahead, as does the default; the
// text report names them.
func TestRunSpeculation(t *testing.T) {
	t.Parallel()
	run := func(extra ...string) schemas.JobReport {
		args := append([]string{"run", "--disks", "5", "--k", "2", "--sim-accuracy", "0.9", "--seed", "4", "--json"}, extra...)
		out := runMain(t, args...)
		if out.code != 0 {
			t.Fatalf("maker %v: exit %d: %s", args, out.code, out.stderr)
		}
		var rep schemas.JobReport
		if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil {
			t.Fatalf("report: %v\n%s", err, out.stdout)
		}
		return rep
	}
	base, spec, def := run("--speculation-depth", "0"), run("--speculation-depth", "6"), run()
	if spec.TraceSHA256 != base.TraceSHA256 || spec.Steps != base.Steps || spec.Samples != base.Samples || spec.Votes != base.Votes {
		t.Errorf("with speculation: trace %s steps %d samples %d votes %d; without: %s %d %d %d",
			spec.TraceSHA256, spec.Steps, spec.Samples, spec.Votes, base.TraceSHA256, base.Steps, base.Samples, base.Votes)
	}
	if spec.SpeculativeSamples == 0 || base.SpeculativeSamples != 0 {
		t.Errorf("speculative samples %d with, %d without", spec.SpeculativeSamples, base.SpeculativeSamples)
	}
	// The command line speculates by default, deciding the same.
	if def.SpeculativeSamples == 0 || def.TraceSHA256 != base.TraceSHA256 || def.Samples != base.Samples {
		t.Errorf("default run: speculative samples %d, trace %s samples %d; want some, %s, %d",
			def.SpeculativeSamples, def.TraceSHA256, def.Samples, base.TraceSHA256, base.Samples)
	}
	out := runMain(t, "run", "--disks", "4", "--k", "2", "--speculation-depth", "3")
	if out.code != 0 || !strings.Contains(out.stdout, "speculation ") || !strings.Contains(out.stdout, "lost speculation") {
		t.Errorf("text report (exit %d) does not show speculation:\n%s\n%s", out.code, out.stdout, out.stderr)
	}
}
