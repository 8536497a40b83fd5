package voter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/voter"
)

// fleetTasks finds tasks in a fleet's registry (for the simulated model).
type fleetTasks struct{ env *fleettest.Env }

func (s fleetTasks) Task(ctx context.Context, ref task.Ref) (task.Task, error) {
	return s.env.Fleet.Registry.Task(ctx, ref)
}

// TestBigParamsByReference: on a real fleet (nats-server, redis-server, a
// coordinator, a voter and the simulated model over HTTP, each on its own
// connection), a job whose params (1.4 MB) are larger than a NATS message
// is submitted and solved; every sample request names the params by
// reference and stays small, whatever the input's size.
func TestBigParamsByReference(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	src, err := os.ReadFile(filepath.Join("..", "examples", "tasks", "classify.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := env.Fleet.Registry.Register(ctx, src, "test"); err != nil {
		t.Fatal(err)
	}
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 0.95, Seed: 4, Tasks: fleetTasks{env}, Inputs: env.Fleet.Inputs})
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 16, SimHints: true})

	const n = 20_000
	labels := []string{"positive", "negative", "neutral"}
	records, truth := make([]string, n), make([]string, n)
	for i := range records {
		records[i] = fmt.Sprintf("record %06d %s", i, strings.Repeat("z", 50))
		truth[i] = labels[i%3]
	}
	params, _ := json.Marshal(map[string]any{"choices": labels, "records": records, "truth": truth})
	if len(params) < 1<<20 {
		t.Fatalf("params of %d bytes: the case wants more than a message", len(params))
	}

	var (
		mu       sync.Mutex
		requests int
		largest  int
		inline   int
	)
	sub, err := env.NC.Subscribe(env.Bus.Namespace.SampleSubject("*", "*"), func(m *nats.Msg) {
		var req schemas.SampleRequest
		if schemas.Decode(m.Data, &req) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		requests++
		largest = max(largest, len(m.Data))
		if req.ParamsRef == "" {
			inline++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	spec := schemas.JobSpec{JobID: jobs.NewJobID(), Task: "classify", Params: params, K: 2, Seed: 3, StepLimit: 40}
	env.Submit(&spec)
	if !schemas.ValidInputRef(spec.ParamsRef) || len(spec.Params) != 0 {
		t.Fatalf("submitted with params_ref %q and %d bytes inline; want a reference only", spec.ParamsRef, len(spec.Params))
	}
	rep := env.Wait(spec)
	if rep.Steps != 40 || rep.Errors != 0 || rep.State != schemas.StateUnsolved || rep.ParamsRef != spec.ParamsRef {
		t.Fatalf("report: %s, %d steps, %d errors, params_ref %q (%s)", rep.State, rep.Steps, rep.Errors, rep.ParamsRef, rep.Reason)
	}
	mu.Lock()
	defer mu.Unlock()
	if requests == 0 || inline != 0 || largest > 8<<10 {
		t.Errorf("%d sample requests seen, %d with params inline, the largest %d bytes; want every one by reference, under 8 KiB",
			requests, inline, largest)
	}
}

// TestRefusedRequestTellsTheJob: a request the voter cannot run (its
// params by a reference the inputs store does not hold) is dead-lettered
// as before, and the job is told why, once, as an unserved notice of
// cause task: its status then says task_refused with the voter's error,
// where before it only waited, unanswered.
func TestRefusedRequestTellsTheJob(t *testing.T) {
	t.Parallel()
	const tenant, job = "acme", "lost-params"
	env := fleettest.New(t)
	results := fleettest.Capture[schemas.SampleResult](env, bus.DefaultNamespace.ResultJobWildcard(tenant, job))
	prov := newProvider(t, func(map[string]any) (int, string) { return 200, completion(`move = [1, 0, 2]`, 10, 5) })
	env.StartVoter(prov.client(t), voter.Config{Model: "own-model", Concurrency: 2})
	lost := schemas.InputRef([]byte(`{"disks": 3, "never": "stored"}`))
	publish(t, env, sampleRequest(t, tenant, job, 1, func(r *schemas.SampleRequest) { r.Params, r.ParamsRef = nil, lost }))
	fleettest.Eventually(t, 20*time.Second, func() bool { return len(results.All()) == 1 }, "no notice")
	r := results.All()[0]
	if r.Outcome != schemas.OutcomeUnserved || r.Cause != schemas.UnservedTask || !strings.Contains(r.Detail, "not in the inputs store") || r.Token != testToken {
		t.Errorf("notice %+v, want unserved, cause task, naming the missing params, with the sample's token", r)
	}
	if len(prov.received()) != 0 {
		t.Error("the provider was called for a request the voter cannot run")
	}
}
