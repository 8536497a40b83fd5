package task_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// TestParaphrase: each variant wraps the task's messages, unchanged, in
// its own preface and restatement; variant 0 is the prompt itself;
// others are refused. The bound agrees with the wire's.
func TestParaphrase(t *testing.T) {
	if task.MaxParaphrase != schemas.MaxPromptVariant {
		t.Fatalf("task.MaxParaphrase %d != schemas.MaxPromptVariant %d", task.MaxParaphrase, schemas.MaxPromptVariant)
	}
	msgs := []task.Message{{Role: "system", Content: "rules"}, {Role: "user", Content: "Current state: [[1],[],[]]"}}
	orig := slices.Clone(msgs)
	if got, err := task.Paraphrase(msgs, 0); err != nil || !slices.Equal(got, msgs) {
		t.Errorf("variant 0: %v, %v; want the prompt itself", got, err)
	}
	seen := map[string]bool{}
	for v := 1; v <= task.MaxParaphrase; v++ {
		got, err := task.Paraphrase(msgs, v)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 || !slices.Equal(got[1:3], orig) || got[0].Role != "system" || got[3].Role != "user" {
			t.Fatalf("variant %d: %v; want preface, the task's messages, restatement", v, got)
		}
		for _, m := range []task.Message{got[0], got[3]} {
			if seen[m.Content] || strings.Contains(m.Content, "Current state:") || strings.ContainsAny(m.Content, "0123456789[]=") {
				t.Errorf("variant %d: %q repeats another variant's text or looks like part of a task's state", v, m.Content)
			}
			seen[m.Content] = true
		}
	}
	if !slices.Equal(msgs, orig) {
		t.Errorf("the task's messages were changed: %v", msgs)
	}
	for _, v := range []int{-1, task.MaxParaphrase + 1} {
		if _, err := task.Paraphrase(msgs, v); err == nil {
			t.Errorf("variant %d accepted", v)
		}
	}
}
