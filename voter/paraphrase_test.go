package voter_test

import (
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/voter"
)

// TestPromptVariant: a request with a prompt variant (a correlated step's
// decorrelated sample) reaches the model as the task's prompt wrapped in
// that paraphrase; one without, as the task's prompt; a forged variant
// out of range is refused as malformed and never reaches the model.
func TestPromptVariant(t *testing.T) {
	t.Parallel()
	const tenant, job = "acme", "variants"
	env := fleettest.New(t)
	results := fleettest.Capture[schemas.SampleResult](env, bus.DefaultNamespace.ResultJobWildcard(tenant, job))
	prov := newProvider(t, func(map[string]any) (int, string) { return 200, completion(`move = [1, 0, 2]`, 10, 5) })
	v := env.StartVoter(prov.client(t), voter.Config{Model: "own-model", Concurrency: 2})

	publish(t, env, sampleRequest(t, tenant, job, 1, nil))
	publish(t, env, sampleRequest(t, tenant, job, 2, func(r *schemas.SampleRequest) { r.PromptVariant = 3 }))
	publish(t, env, sampleRequest(t, tenant, job, 3, func(r *schemas.SampleRequest) { r.PromptVariant = schemas.MaxPromptVariant + 1 }))
	fleettest.Eventually(t, 20*time.Second, func() bool { return len(results.All()) == 2 && v.Stats().Malformed == 1 },
		"%d of 2 requests answered, %d malformed", len(results.All()), v.Stats().Malformed)

	in, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	own, err := in.Prompt(in.Initial())
	if err != nil {
		t.Fatal(err)
	}
	para, _ := task.Paraphrase(own, 3)
	bySeed := map[float64][]any{}
	for _, b := range prov.received() {
		seed, _ := b["seed"].(float64)
		msgs, _ := b["messages"].([]any)
		bySeed[seed] = msgs
	}
	if len(bySeed) != 2 {
		t.Fatalf("the provider received %d requests, want 2 (the forged variant refused)", len(bySeed))
	}
	for seed, want := range map[float64][]task.Message{701: own, 702: para} {
		got := bySeed[seed]
		if len(got) != len(want) {
			t.Fatalf("seed %v: %d messages, want %d", seed, len(got), len(want))
		}
		for i, m := range want {
			g, _ := got[i].(map[string]any)
			if g["role"] != m.Role || g["content"] != m.Content {
				t.Errorf("seed %v message %d: %v, want %s %q", seed, i, g, m.Role, m.Content)
			}
		}
	}
}
