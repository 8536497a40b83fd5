package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestTaskRenderAndCheck: render prints a step's prompt from the state the
// reference reaches (or one given); check reads a reply as the fleet
// does: a vote (right or wrong, and its next state) exits 0, a red flag
// exits 1 naming it, and bad flags are usage errors.
func TestTaskRenderAndCheck(t *testing.T) {
	t.Parallel()
	multiply := example("multiply.yaml")
	classify := example("classify.yaml")
	params := "@" + example("classify.params.json")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"render a step", []string{"render", multiply, "--params", `{"a":"1234","b":"567"}`, "--step", "5"}, ExitOK,
			[]string{`state: {"acc":[8,7,2,2,0,0,0],"carry":2,"i":1,"j":1}`, "--- system ---", "--- user ---\nx = 3\ny = 6\nz = 2\nc = 2"}},
		{"render a given state", []string{"render", classify, "--params", params, "--state", `{"n": 4, "labels": []}`}, ExitOK,
			[]string{"Record:\nStopped charging after a month"}},
		{"render past the goal", []string{"render", classify, "--params", params, "--step", "9"}, ExitUsage, nil},
		{"check a right reply", []string{"check", classify, "--params", params, "--step", "2", "--reply", `{"label": "neutral"}`}, ExitOK,
			[]string{`vote        {"label":"neutral"}`, "verdict     right", `next state  {"labels":["positive","negative","neutral"],"n":3}`}},
		{"check a wrong reply", []string{"check", classify, "--params", params, "--step", "2", "--reply", `{"label": "positive"}`}, ExitOK,
			[]string{`verdict     wrong: the reference answers {"label":"neutral"}`}},
		{"check a red flag", []string{"check", classify, "--params", params, "--step", "2", "--reply", `{"label": "angry"}`}, ExitError,
			[]string{"red flag    unknown_label"}},
		{"check an unreadable reply", []string{"check", classify, "--params", params, "--reply", "no idea"}, ExitError,
			[]string{"red flag    parse: task: malformed answer: no JSON object in the reply"}},
		{"check without a reply", []string{"check", classify, "--params", params}, ExitUsage, nil},
		{"step and state", []string{"render", classify, "--params", params, "--step", "1", "--state", "{}"}, ExitUsage, nil},
		{"no params", []string{"render", classify}, ExitUsage, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runMain(t, append([]string{"task"}, tc.args...)...)
			if res.code != tc.code {
				t.Errorf("exit %d, want %d; stdout:\n%s\nstderr %q", res.code, tc.code, res.stdout, res.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, res.stdout)
				}
			}
		})
	}
}

// TestTaskVersionsAndDelete: "latest" is the highest version, not the
// last registered; delete is refused while a job not finished pins the
// version, and works once it has finished.
func TestTaskVersionsAndDelete(t *testing.T) {
	t.Parallel()
	s := startFleetServer(t)
	v := func(version string) string {
		return writeFile(t, "counter-"+version+".yaml", edit(t, counterSpec, "version: 1.0.0", "version: "+version))
	}
	for _, version := range []string{"1.10.0", "1.9.0", "2.0.0-rc1"} { // registered out of order
		if res := s.maker(t, "task", "register", v(version)); res.code != ExitOK {
			t.Fatalf("register %s: exit %d, stderr %q", version, res.code, res.stderr)
		}
	}
	if res := s.maker(t, "task", "show", "counter", "--json"); !strings.Contains(res.stdout, `"task_version": "1.10.0"`) {
		t.Errorf("show counter: %s; want 1.10.0, the highest release", res.stdout)
	}
	res := s.maker(t, "submit", "--task", "counter", "--params", `{"n": 3}`, "--k", "1", "--job-id", "c1")
	if res.code != ExitOK {
		t.Fatalf("submit: exit %d, stderr %q", res.code, res.stderr)
	}
	topo, err := topology.Open(t.Context(), s.js, topology.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := jobs.Get(t.Context(), topo, schemas.DefaultTenant, "c1")
	if err != nil || rec.Spec.TaskVersion != "1.10.0" {
		t.Fatalf("the job pinned %q (%v), want 1.10.0", rec.Spec.TaskVersion, err)
	}
	refused(t, s.maker(t, "task", "delete", "counter@1.10.0"), "is pinned by job default/c1, not finished")
	refused(t, s.maker(t, "task", "delete", "counter"), "name the version to delete")
	refused(t, s.maker(t, "task", "delete", "counter@7.0.0"), "counter@7.0.0")
	if err := jobs.MarkFinished(t.Context(), topo, schemas.DefaultTenant, "c1", schemas.StateCancelled); err != nil {
		t.Fatal(err)
	}
	if res := s.maker(t, "task", "delete", "counter@1.10.0"); res.code != ExitOK || res.stdout != "deleted counter@1.10.0\n" {
		t.Fatalf("delete: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if got := s.registered(t); len(got) != 2 || !strings.HasPrefix(got[0], "counter@1.9.0 ") || !strings.HasPrefix(got[1], "counter@2.0.0-rc1 ") {
		t.Errorf("registered after the delete: %v, want 1.9.0 and 2.0.0-rc1 in version order", got)
	}
	if res := s.maker(t, "task", "show", "counter", "--json"); !strings.Contains(res.stdout, `"task_version": "1.9.0"`) {
		t.Errorf("show counter after the delete: %s; want 1.9.0, the highest release left", res.stdout)
	}
}

// TestNoWrongAnswersWarning: a spec that gives the simulated model no
// wrong answer is tested with a warning that its samples per step will
// not show the accuracy asked for; one that does (multiply's, whose
// answer fields can be moved) is not.
func TestNoWrongAnswersWarning(t *testing.T) {
	t.Parallel()
	noWrong := writeFile(t, "nowrong.yaml", edit(t, counterSpec,
		"      next: {type: integer}", "      next: {type: integer}\n    additionalProperties: false",
		"done: state.count == params.n", "done: state.count == params.n\nred_flags:\n  - name: not_next\n    when: answer.next != state.count + 1"))
	res := runMain(t, "task", "test", noWrong, "--params", `{"n": 3}`, "--sim-accuracy", "0.9", "--k", "1")
	if !strings.Contains(res.stderr, "warning: the spec gives the simulated model no wrong answer") {
		t.Errorf("no warning: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runMain(t, "task", "test", example("multiply.yaml"), "--params", `{"a":"12","b":"34"}`, "--sim-accuracy", "0.9", "--k", "2")
	if strings.Contains(res.stderr, "warning") {
		t.Errorf("a warning for a spec with wrong answers: %q", res.stderr)
	}
}

// TestExpectedSteps: a loop task whose max_steps is a loose bound plans
// its k for expected_steps, not for the bound; expected_steps out of
// [1, max_steps] is refused.
func TestExpectedSteps(t *testing.T) {
	t.Parallel()
	loose := edit(t, counterSpec, "max_steps: params.n", "max_steps: params.n * 1000")
	planned := edit(t, loose, "max_steps: params.n * 1000", "max_steps: params.n * 1000\nexpected_steps: params.n")
	k := func(src string) int {
		t.Helper()
		res := runMain(t, "task", "test", writeFile(t, "spec.yaml", src), "--params", `{"n": 5}`, "--sim-accuracy", "0.9", "--json")
		var rep schemas.JobReport
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.code != ExitOK {
			t.Fatalf("exit %d, %v: %q, stderr %q", res.code, err, res.stdout, res.stderr)
		}
		return rep.K
	}
	if kl, kp := k(loose), k(planned); kp >= kl {
		t.Errorf("k %d planned for 5 expected steps, %d for a bound of 5000: want fewer", kp, kl)
	}
	bad := writeFile(t, "bad.yaml", edit(t, loose, "max_steps: params.n * 1000", "max_steps: params.n * 1000\nexpected_steps: params.n * 2000"))
	refused(t, runMain(t, "task", "test", bad, "--params", `{"n": 5}`), "expected_steps is 10000 for these params, want 1 to max_steps (5000)")
}
