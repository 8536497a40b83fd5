package cli

import (
	"strings"
	"testing"
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
