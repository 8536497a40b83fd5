// Package judgetest starts what the judge's integration tests run against:
// a real in-process nats-server, the simulated model on 127.0.0.1:0 logging
// every request it receives, and judge replicas, each with its cleanup
// registered on the test (judges stop before the model and NATS).
package judgetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

// Timeout bounds every wait of a test on the judge: generous, for slow
// machines.
const Timeout = 90 * time.Second

// Env is one test's NATS, simulated model and connection.
type Env struct {
	TB   testing.TB
	NATS *testkit.NATS
	NC   *nats.Conn
	JS   jetstream.JetStream
	Sim  *simllm.Running
	// Requests holds every request body the simulated model received, one
	// JSON line each: everything that left for a model.
	Requests *SyncBuffer
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes.
type SyncBuffer = testkit.SyncBuffer

// Start starts NATS and the simulated model (cfg, with request logging).
func Start(tb testing.TB, cfg simllm.Config) *Env {
	tb.Helper()
	e := &Env{TB: tb, NATS: testkit.StartNATS(tb), Requests: &SyncBuffer{}}
	cfg.LogRequests = e.Requests
	sim, err := simllm.Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sim.Close(ctx)
	})
	e.Sim = sim
	e.NC, e.JS = testkit.Connect(tb, e.NATS.URL)
	return e
}

// TestSettings are cheap settings for tests: every type's panel (and so
// the arbitration panel) is m1, m2 and m3, the judge is "judge", every
// model costs $1 in and $2 out per million tokens, outputs are capped at
// 1000 (members) and 2000 (judge) tokens, and the panel deadline is 20s.
func TestSettings() judge.Settings {
	panel := []string{"m1", "m2", "m3"}
	s := judge.Settings{
		Panels:          map[string][]string{},
		JudgeModel:      "judge",
		DefaultPrice:    &judge.Price{InputUSDPerMTok: 1, OutputUSDPerMTok: 2},
		MemberTimeout:   20 * time.Second,
		JudgeTimeout:    20 * time.Second,
		MemberMaxTokens: 1000,
		JudgeMaxTokens:  2000,
		MaxAttempts:     1,
	}
	for _, t := range schemas.ProblemTypes() {
		s.Panels[t] = panel
	}
	return s
}

// StartJudge starts a judge replica on its own connection, serving models
// from the simulated model.
func (e *Env) StartJudge(s judge.Settings) *judge.Service {
	e.TB.Helper()
	_, js := testkit.Connect(e.TB, e.NATS.URL)
	return Serve(e.TB, js, s, e.Sim.URL())
}

// Serve starts a judge replica on js (another test fleet's NATS), serving
// models from the OpenAI-compatible server at baseURL; it stops when the
// test ends.
func Serve(tb testing.TB, js jetstream.JetStream, s judge.Settings, baseURL string) *judge.Service {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	sv, err := judge.New(ctx, js, judge.Config{Settings: s, BaseURL: baseURL, Concurrency: 4, SoftStop: 5 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	if err := sv.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(sv.Stop)
	return sv
}

// Request returns a valid request of session with every prior attempt
// recorded; problem is prefixed with the trigger unless it has one.
func Request(id, session, problem string) *schemas.BreakGlassRequest {
	if !strings.HasPrefix(strings.ToLower(problem), schemas.BreakGlassTrigger) {
		problem = schemas.BreakGlassTrigger + " " + problem
	}
	return &schemas.BreakGlassRequest{
		Header:    schemas.NewHeader(schemas.KindBreakGlassRequest),
		RequestID: id, Tenant: "acme", Session: session, Requester: "test",
		Problem: problem,
		PriorAttempts: []schemas.PriorAttempt{
			{Kind: schemas.AttemptLocalModel, Note: "local model: wrong answer"},
			{Kind: schemas.AttemptFrontierModel, Note: "frontier model: wrong answer"},
			{Kind: schemas.AttemptTools, Note: "tools: no help"},
		},
		SubmittedAt: time.Now().UTC(),
	}
}

// Ask sends req to the judges of the default namespace and waits.
func (e *Env) Ask(req *schemas.BreakGlassRequest, opts ...judgeclient.AskOption) (*schemas.BreakGlassResponse, error) {
	e.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	return judgeclient.Ask(ctx, e.JS, bus.DefaultNamespace, req, opts...)
}

// Arbitrate sends req to the judges of the default namespace and waits.
func (e *Env) Arbitrate(req *schemas.ArbitrationRequest) (*schemas.ArbiterDecision, error) {
	e.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	return judgeclient.Arbitrate(ctx, e.JS, bus.DefaultNamespace, req)
}

// Audit returns the audit records of session.
func (e *Env) Audit(session string) []schemas.BreakGlassAudit {
	e.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	recs, err := judge.ListAudit(ctx, e.JS, bus.DefaultNamespace, "", session)
	if err != nil {
		e.TB.Fatal(err)
	}
	return recs
}

// Outcomes lists the outcomes of recs, in order, as "request:outcome".
func Outcomes(recs []schemas.BreakGlassAudit) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s:%s", r.RequestID, r.Outcome)
	}
	return out
}
