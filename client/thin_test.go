package client_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// TestThinDeps: the public client links neither the spec language (CEL)
// nor Redis: a program that submits jobs carries the client, not the
// server.
func TestThinDeps(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go") // the go test runs under
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(testCtx(t), goBin, "list", "-deps", "github.com/makerfleet/makerfleet/client/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{"cel.dev/cel-go", "github.com/redis/go-redis", "github.com/makerfleet/makerfleet/task/spec"} {
			if dep == heavy || strings.HasPrefix(dep, heavy+"/") {
				t.Errorf("the client links %s", dep)
			}
		}
	}
}

// TestTaskSpecsThinAndCompiled: a client without WithTaskSpecs pins a job
// naming a registered spec and queues it, and the coordinator refuses its
// params with a failed report that says why; with WithTaskSpecs the same
// job is refused at Submit, nothing queued.
func TestTaskSpecsThinAndCompiled(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	env.StartCoordinator(coordinator.Config{})
	ctx := testCtx(t)
	src, err := os.ReadFile("../examples/tasks/multiply.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := env.Fleet.Registry.Register(ctx, src, "test")
	if err != nil {
		t.Fatal(err)
	}
	bad := schemas.JobSpec{Task: "multiply", Params: json.RawMessage(`{"a":"12","b":"x"}`), K: 1}

	thin := dial(t, env, client.WithTenant("acme"))
	tasks, err := thin.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := tasks.Resolve(ctx, "multiply", "")
	if err != nil || ref.Hash != rec.Hash || ref.Version != rec.TaskVersion {
		t.Fatalf("resolve: %+v, %v; want %s@%s", ref, err, rec.TaskVersion, rec.Hash)
	}
	if _, err := tasks.Task(ctx, ref); !errors.Is(err, taskreg.ErrNoCompiler) {
		t.Errorf("a thin client loaded a spec: %v, want ErrNoCompiler", err)
	}
	job := bad
	job.JobID = "thin"
	if _, err := thin.Submit(ctx, job); err != nil {
		t.Fatalf("thin submit: %v", err)
	}
	rep, err := thin.Wait(ctx, "thin", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.State != schemas.StateFailed || !strings.Contains(rep.Reason, "params") {
		t.Errorf("thin job: state %s, reason %q; want failed over its params", rep.State, rep.Reason)
	}
	info, err := thin.Job(ctx, "thin")
	if err != nil || info.Record.Spec.TaskHash != rec.Hash {
		t.Errorf("thin job pinned %q, %v; want %s", info.Record.Spec.TaskHash, err, rec.Hash)
	}

	full := dial(t, env, client.WithTenant("acme"), client.WithTaskSpecs(taskspec.CompileSpec))
	job.JobID = "full"
	if _, err := full.Submit(ctx, job); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("compiled submit: %v, want ErrInvalid", err)
	}
	if _, err := full.Job(ctx, "full"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a refused job was written: %v", err)
	}
}
