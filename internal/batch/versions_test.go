package batch_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// TestCreateTaskVersions: a batch line names a spec's version as
// `maker submit --task` does (NAME@VERSION) or with task_version, and the
// batch example of docs/api.md is taken with the shipped multiply.yaml; a
// line whose two ways disagree is refused as an unknown task.
func TestCreateTaskVersions(t *testing.T) {
	t.Parallel()
	s, topo := newStore(t)
	ctx := ctxFor(t)
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "tasks", "multiply.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := taskreg.New(topo.Tasks, builtin.Registry(), taskspec.CompileSpec).Register(ctx, src, "test"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Join([]string{
		`{"custom_id": "q1", "task": "hanoi", "params": {"disks": 4}, "k": 2}`, // docs/api.md
		`{"custom_id": "q2", "task": "multiply", "params": {"a": "1234", "b": "5678"}, "k": 3, "priority": 5}`,
		`{"custom_id": "q3", "task": "multiply@1.0.0", "params": {"a": "12", "b": "34"}, "k": 1}`,
		`{"custom_id": "q4", "task": "multiply", "task_version": "1.0.0", "params": {"a": "12", "b": "34"}, "k": 1}`,
		`{"custom_id": "q5", "task": "multiply@1.0.0", "task_version": "2.0.0", "params": {"a": "12", "b": "34"}, "k": 1}`,
	}, "\n")
	rec, err := s.Create(ctx, "acme", strings.NewReader(lines), batch.CreateOptions{Priority: 5})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Counts.Valid != 4 || rec.Counts.Invalid != 1 {
		t.Fatalf("counts %+v, want 4 valid and 1 invalid", rec.Counts)
	}
	errs := output(t, ctx, s, "acme", rec.ID, true)
	if len(errs) != 1 || errs[0].Line != 5 || errs[0].Error.Code != schemas.BatchErrUnknownTask || !strings.Contains(errs[0].Error.Message, "names version 1.0.0, and task_version says 2.0.0") {
		t.Errorf("errors %+v", errs)
	}
}
