package taskreg_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/task/spec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const counter = `name: counter
version: "1"
params: {type: object, properties: {n: {type: integer, minimum: 1}}, required: [n]}
initial: '{"i": 0}'
max_steps: params.n
prompt: {user: 'At {{.state.i}}: say {"next": {"i": <one more>}}'}
answer:
  format: json
  schema: {type: object, properties: {next: {type: object}}, required: [next]}
next: {field: next}
done: state.i == params.n
`

func registry(t *testing.T) (*taskreg.Registry, context.Context) {
	t.Helper()
	_, topo := testkit.StartTopology(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return taskreg.New(topo.Tasks, builtin.Registry(), spec.CompileSpec), ctx
}

// TestRegister: a version is registered once; the same spec again is no
// change; another spec under a taken name@version, a built-in's name and an
// invalid spec are refused, with nothing written.
func TestRegister(t *testing.T) {
	t.Parallel()
	reg, ctx := registry(t)
	rec, created, err := reg.Register(ctx, []byte(counter), "alice")
	if err != nil || !created || rec.Name != "counter" || rec.TaskVersion != "1" || rec.Hash != spec.Hash([]byte(counter)) {
		t.Fatalf("register: %+v created %v err %v", rec, created, err)
	}
	if _, created, err := reg.Register(ctx, []byte(counter), "bob"); err != nil || created {
		t.Errorf("the same spec again: created %v, %v; want no change", created, err)
	}
	other := strings.Replace(counter, "max_steps: params.n", "max_steps: params.n + 1", 1)
	if _, _, err := reg.Register(ctx, []byte(other), "bob"); !errors.Is(err, taskreg.ErrConflict) {
		t.Errorf("another spec under counter@1: %v, want ErrConflict", err)
	}
	if _, _, err := reg.Register(ctx, []byte(strings.Replace(counter, "name: counter", "name: hanoi", 1)), "bob"); !errors.Is(err, taskreg.ErrBuiltin) {
		t.Errorf("a built-in's name: %v, want ErrBuiltin", err)
	}
	if _, _, err := reg.Register(ctx, []byte("name: x\n"), "bob"); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("an invalid spec: %v, want spec.ErrInvalid", err)
	}
	list, err := reg.List(ctx)
	if err != nil || len(list) != 1 || list[0].By != "alice" {
		t.Errorf("list %+v, %v: want only alice's counter@1", list, err)
	}
}

// TestResolveAndLoad: a job pins the latest version (or the one it names)
// with its hash; loading by that reference gives the compiled spec, and a
// reference whose hash is not the registered one is refused.
func TestResolveAndLoad(t *testing.T) {
	t.Parallel()
	reg, ctx := registry(t)
	v2 := strings.Replace(counter, `version: "1"`, `version: "2"`, 1)
	for _, src := range []string{counter, v2} {
		if _, _, err := reg.Register(ctx, []byte(src), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	ref, err := reg.Resolve(ctx, "counter", "")
	if err != nil || ref.Version != "2" || ref.Hash != spec.Hash([]byte(v2)) {
		t.Fatalf("latest: %+v, %v", ref, err)
	}
	if ref, err = reg.Resolve(ctx, "counter", "1"); err != nil || ref.Version != "1" {
		t.Fatalf("counter@1: %+v, %v", ref, err)
	}
	if ref, err := reg.Resolve(ctx, "hanoi", ""); err != nil || ref != (task.Ref{Name: "hanoi"}) {
		t.Errorf("built-in: %+v, %v", ref, err)
	}
	for _, bad := range [][2]string{{"nope", ""}, {"counter", "9"}, {"hanoi", "1"}} {
		if _, err := reg.Resolve(ctx, bad[0], bad[1]); !errors.Is(err, task.ErrUnknownTask) {
			t.Errorf("%s@%s: %v, want ErrUnknownTask", bad[0], bad[1], err)
		}
	}
	in, err := task.BindRef(ctx, reg, ref, json.RawMessage(`{"n": 3}`))
	if err != nil || in.TotalSteps() != 3 {
		t.Fatalf("bind %+v: %v", ref, err)
	}
	forged := ref
	forged.Hash = "sha256:" + strings.Repeat("0", 64)
	if _, err := reg.Task(ctx, forged); !errors.Is(err, taskreg.ErrChanged) {
		t.Errorf("a reference with another hash: %v, want ErrChanged", err)
	}
	// Another coordinator's registry, over the same bucket, loads it too.
	_, topo := testkit.StartTopology(t)
	if _, err := taskreg.New(topo.Tasks, builtin.Registry(), spec.CompileSpec).Task(ctx, ref); !errors.Is(err, task.ErrUnknownTask) {
		t.Errorf("a fleet without the spec: %v, want ErrUnknownTask", err)
	}
}

// TestNoCompiler: a registry made without a compiler pins specs from their
// records but neither registers nor loads one, even a spec another
// registry of the process compiled; built-in tasks it loads as ever.
func TestNoCompiler(t *testing.T) {
	t.Parallel()
	_, topo := testkit.StartTopology(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := taskreg.New(topo.Tasks, builtin.Registry(), spec.CompileSpec)
	if _, _, err := full.Register(ctx, []byte(counter), "alice"); err != nil {
		t.Fatal(err)
	}
	ref, err := full.Resolve(ctx, "counter", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := full.Task(ctx, ref); err != nil { // compiled in this process now
		t.Fatal(err)
	}
	thin := taskreg.New(topo.Tasks, builtin.Registry(), nil)
	if got, err := thin.Resolve(ctx, "counter", ""); err != nil || got != ref {
		t.Errorf("thin resolve: %+v, %v; want %+v", got, err, ref)
	}
	if _, err := thin.Task(ctx, ref); !errors.Is(err, taskreg.ErrNoCompiler) {
		t.Errorf("thin load: %v, want ErrNoCompiler", err)
	}
	v2 := strings.Replace(counter, `version: "1"`, `version: "2"`, 1)
	if _, _, err := thin.Register(ctx, []byte(v2), "bob"); !errors.Is(err, taskreg.ErrNoCompiler) {
		t.Errorf("thin register: %v, want ErrNoCompiler", err)
	}
	if _, err := thin.Resolve(ctx, "counter", "2"); !errors.Is(err, task.ErrUnknownTask) {
		t.Errorf("a refused registration was written: %v", err)
	}
	if _, err := task.BindRef(ctx, thin, task.Ref{Name: "hanoi"}, json.RawMessage(`{"disks": 3}`)); err != nil {
		t.Errorf("thin built-in: %v", err)
	}
}

// TestParseRef: NAME or NAME@VERSION.
func TestParseRef(t *testing.T) {
	for in, want := range map[string][2]string{"hanoi": {"hanoi", ""}, "counter@1.0.0": {"counter", "1.0.0"}} {
		n, v, err := taskreg.ParseRef(in)
		if err != nil || n != want[0] || v != want[1] {
			t.Errorf("%q: %q %q %v", in, n, v, err)
		}
	}
	for _, bad := range []string{"", "@1", "x@", "x@a b", "x@1@2"} {
		if _, _, err := taskreg.ParseRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
