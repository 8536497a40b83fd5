package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

// startJudge runs a judge on the test fleet's NATS, answering from the
// simulated model.
func (e *apiEnv) startJudge() {
	e.t.Helper()
	sim := fleettest.StartSim(e.t, simllm.Config{Accuracy: 1, Seed: 1})
	js, err := jetstream.New(e.fleet.Connect("judge"))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	sv, err := judge.New(ctx, js, judge.Config{Settings: judgetest.TestSettings(), BaseURL: sim.URL(), Concurrency: 2,
		SoftStop: 5 * time.Second, Storage: jetstream.MemoryStorage})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := sv.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(sv.Stop)
}

// breakGlassBody is a valid request body as a tenant sends it: no kind,
// no tenant, no requester (the key says both).
func breakGlassBody(id string) map[string]any {
	r := judgetest.Request(id, "s1", "the build fails with a linker error")
	return map[string]any{
		"request_id": r.RequestID, "session": r.Session, "problem": r.Problem, "prior_attempts": r.PriorAttempts,
		"submitted_at": r.SubmittedAt,
	}
}

// TestBreakGlassThroughAPI: a tenant asks the judges through maker serve
// (tenants have no NATS identity) and reads the answer; the tenant and the
// requester come from its key, and a body naming others is refused; no
// other tenant reads the answer.
func TestBreakGlassThroughAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	// Before any judge runs, there is nowhere to send it: 503, not a hang.
	e.json(http.MethodPost, "/v1/breakglass", e.key[alpha], breakGlassBody("early")).
		problem(t, http.StatusServiceUnavailable, api.TypeUnavailable)
	e.startJudge()

	var acc schemas.BreakGlassAccepted
	e.json(http.MethodPost, "/v1/breakglass", e.key[alpha], breakGlassBody("r1")).decode(t, http.StatusAccepted, &acc)
	if acc.RequestID != "r1" || acc.Tenant != alpha || acc.Requester != "alpha test key" {
		t.Errorf("accepted %+v, want r1 of alpha by the key's name", acc)
	}
	var resp schemas.BreakGlassResponse
	e.json(http.MethodGet, "/v1/breakglass/r1?wait=60", e.key[alpha], nil).decode(t, http.StatusOK, &resp)
	if resp.RequestID != "r1" || !schemas.FinalBreakGlassOutcome(resp.Outcome) || resp.Tenant != alpha {
		t.Fatalf("answer %+v, want r1's final answer for alpha", resp)
	}
	// The audit trail names the key's holder, whatever a body could say.
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	recs, err := judge.ListAudit(ctx, e.fleet.Topo.JS, bus.DefaultNamespace, alpha, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 || recs[0].Requester != "alpha test key" {
		t.Errorf("audit %+v, want the requester from the key", recs)
	}

	// Beta cannot read alpha's answer: its id is simply unknown to beta.
	e.json(http.MethodGet, "/v1/breakglass/r1", e.key[beta], nil).problem(t, http.StatusNotFound, api.TypeNotFound)

	// The body may not name another tenant or another requester.
	forged := breakGlassBody("r2")
	forged["tenant"] = beta
	pr := e.json(http.MethodPost, "/v1/breakglass", e.key[alpha], forged).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
	if !strings.Contains(pr.Detail+pr.Title, "tenant") && len(pr.Errors) == 0 {
		t.Errorf("refusal %+v does not name the tenant", pr)
	}
	forged = breakGlassBody("r3")
	forged["requester"] = "alice"
	e.json(http.MethodPost, "/v1/breakglass", e.key[alpha], forged).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
	// Nothing was asked for them: beta has no r2, alpha no r3.
	e.json(http.MethodGet, "/v1/breakglass/r2", e.key[beta], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, "/v1/breakglass/r3", e.key[alpha], nil).problem(t, http.StatusNotFound, api.TypeNotFound)

	// Bad input: no problem, a bad id, a bad wait.
	bad := breakGlassBody("r4")
	bad["problem"] = ""
	e.json(http.MethodPost, "/v1/breakglass", e.key[alpha], bad).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
	e.json(http.MethodGet, "/v1/breakglass/..%2Fx", e.key[alpha], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, "/v1/breakglass/r1?wait=61", e.key[alpha], nil).problem(t, http.StatusBadRequest, api.TypeBadRequest)
	e.json(http.MethodGet, "/v1/breakglass/r1?wait=-1", e.key[alpha], nil).problem(t, http.StatusBadRequest, api.TypeBadRequest)
}
