package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/presence"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestFleetView: a coordinator and two voters on real NATS and Redis
// appear in GET /v1/fleet (maker fleet --api, an admin key) and in maker
// fleet on NATS with their model and concurrency; a running job shows on
// its coordinator, and raises the voters' counters; a tenant key is refused (403); a forged record (too large for
// the bucket, or over the schema's caps, or under another's key) is
// refused or skipped; a voter killed (no clean stop) leaves the view once
// the bucket's TTL (2s here) has passed.
func TestFleetView(t *testing.T) {
	t.Parallel()
	env := fleettest.NewWith(t, fleettest.Backends{Bus: &topology.Config{Storage: jetstream.MemoryStorage, PresenceTTL: 2 * time.Second}})
	keys := apikey.New(env.Topo)
	admin, _, err := keys.Create(t.Context(), apikey.CreateOptions{Tenant: "ops", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	acme, _, err := keys.Create(t.Context(), apikey.CreateOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	base := startServe(t, env)

	fast := presence.Config{Interval: 100 * time.Millisecond}
	env.StartCoordinator(coordinator.Config{ID: "coord-1", Presence: fast})
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 3, Latency: 300 * time.Millisecond})
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{ID: "voter-a", Model: simllm.DefaultModel, Concurrency: 3, Presence: fast})
	vb := env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{ID: "voter-b", Model: simllm.DefaultModel, Concurrency: 5, Presence: fast})

	// view reads the view as an operator does: maker fleet --json, over
	// the API with the admin key.
	view := func() schemas.FleetView {
		t.Helper()
		res := runMain(t, "fleet", "--json", "--api", base, "--api-key", admin)
		if res.code != ExitOK {
			t.Fatalf("maker fleet --json --api: exit %d: %s", res.code, res.stderr)
		}
		var v schemas.FleetView
		if err := json.Unmarshal([]byte(res.stdout), &v); err != nil {
			t.Fatalf("maker fleet --json printed %q: %v", res.stdout, err)
		}
		return v
	}
	ids := func(v schemas.FleetView) []string {
		var out []string
		for _, p := range v.Voters {
			out = append(out, p.ID)
		}
		return out
	}
	var v schemas.FleetView
	fleettest.Eventually(t, 30*time.Second, func() bool {
		v = view()
		return slices.Equal(ids(v), []string{"voter-a", "voter-b"}) && len(v.Coordinators) == 1
	}, "the view never showed both voters and the coordinator")
	for i, want := range []int{3, 5} {
		p := v.Voters[i]
		if p.Concurrency != want || len(p.Models) == 0 || p.Models[0] != simllm.DefaultModel {
			t.Errorf("voter %s: concurrency %d, models %v; want %d and %s first", p.ID, p.Concurrency, p.Models, want, simllm.DefaultModel)
		}
	}
	if v.Coordinators[0].ID != "coord-1" || v.Totals.Voters != 2 || v.Totals.Concurrency != 8 {
		t.Errorf("coordinators %+v, totals %+v", v.Coordinators, v.Totals)
	}
	if i := slices.IndexFunc(v.Queues, func(q schemas.QueueView) bool { return q.Name == "samples" }); i < 0 || v.Queues[i].Consumer != "voters" {
		t.Errorf("queues %+v: no samples queue on consumer voters", v.Queues)
	}

	// A job (each answer takes 300ms): the coordinator lists it while it
	// runs, with its tenant's samples in flight; the voters' counters rise.
	spec := fleettest.HanoiSpec(3, 1, 1)
	env.Submit(&spec)
	fleettest.Eventually(t, 30*time.Second, func() bool {
		v = view()
		if len(v.Coordinators) != 1 || len(v.Tenants) != 1 {
			return false
		}
		jobs := v.Coordinators[0].Jobs
		return len(jobs) == 1 && jobs[0].ID == spec.JobID && jobs[0].Tenant == spec.Tenant && jobs[0].State == schemas.StateRunning &&
			v.Tenants[0].Tenant == spec.Tenant && v.Tenants[0].Jobs == 1 && v.Totals.Jobs == 1
	}, "the running job never showed on its coordinator: %+v, tenants %+v", v.Coordinators, v.Tenants)
	if rep := env.Wait(spec); rep.State != schemas.StateSolved {
		t.Fatalf("job ended %s", rep.State)
	}
	fleettest.Eventually(t, 30*time.Second, func() bool {
		v = view()
		return v.Totals.SamplesAnswered >= 7 // at least one vote a step
	}, "samples answered never rose: %+v", v.Totals)

	// A tenant's key is refused.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/fleet", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+acme)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /v1/fleet with a tenant key: %d, want 403", resp.StatusCode)
	}
	if res := runMain(t, "fleet", "--api", base, "--api-key", acme); res.code == ExitOK {
		t.Errorf("maker fleet with a tenant key succeeded: %s", res.stdout)
	}

	// Forged records: too large for the bucket (the server refuses it),
	// over the schema's caps, under another's key.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	kv, err := env.JS.KeyValue(ctx, env.Bus.Namespace.PresenceBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "voter.huge", make([]byte, schemas.MaxPresenceBytes+1)); err == nil {
		t.Error("the bucket took a record over schemas.MaxPresenceBytes")
	}
	forged := *vb.Presence(time.Now().UTC())
	forged.ID = "forged"
	forged.Models = make([]string, schemas.MaxPresenceModels+1)
	for i := range forged.Models {
		forged.Models[i] = "m"
	}
	over, _ := json.Marshal(&forged)
	forged.Models, forged.ID = []string{"m"}, "someone-else"
	misplaced, _ := json.Marshal(&forged)
	for key, data := range map[string][]byte{"voter.forged": over, "voter.imposter": misplaced, "voter.junk": []byte(`{"kind":`)} {
		if _, err := kv.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	fleettest.Eventually(t, 30*time.Second, func() bool {
		v = view()
		return v.Skipped >= 3
	}, "forged records not skipped: skipped %d", v.Skipped)
	if got := ids(v); !slices.Equal(got, []string{"voter-a", "voter-b"}) {
		t.Errorf("voters with forged records: %v", got)
	}

	// The table, on NATS.
	res := runMain(t, "fleet", "--nats", env.NATS.URL)
	if res.code != ExitOK {
		t.Fatalf("maker fleet: exit %d: %s", res.code, res.stderr)
	}
	for _, want := range []string{"2 voters (concurrency 8", "VOTER", "voter-a", "voter-b", simllm.DefaultModel, "COORDINATOR", "coord-1",
		"QUEUE", "samples", "voters", "skipped"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("maker fleet does not print %q:\n%s", want, res.stdout)
		}
	}

	// A voter killed (its connection gone first: it deletes nothing)
	// leaves the view once its record is past the TTL.
	vb.Kill()
	fleettest.Eventually(t, 30*time.Second, func() bool {
		v = view()
		return slices.Equal(ids(v), []string{"voter-a"})
	}, "the killed voter stayed in the view: %v", ids(v))
}

// startServe runs maker serve on env's fleet (through Main, as main
// does) until cleanup, and returns its base URL.
func startServe(t *testing.T, env *fleettest.Env) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"serve", "--nats", env.NATS.URL, "--redis", env.Redis().URL(), "--addr", "127.0.0.1:0",
			"--rate", "1000", "--burst", "1000"}, &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		<-code
	})
	var base string
	fleettest.Eventually(t, 30*time.Second, func() bool {
		select {
		case c := <-code:
			code <- c
			t.Fatalf("serve exited %d: %s", c, errb.String())
		default:
		}
		if m := listeningRE.FindStringSubmatch(errb.String()); m != nil {
			base = m[1]
		}
		return base != ""
	}, "serve never listened: %s", errb.String())
	return base
}
