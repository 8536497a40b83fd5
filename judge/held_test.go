package judge_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

// holdAndWait asks req (held by the cost gate) in the background and
// returns once it is held, with the channel of the final answer.
func holdAndWait(ctx context.Context, t *testing.T, env *judgetest.Env, req *schemas.BreakGlassRequest) <-chan askResult {
	t.Helper()
	held := make(chan struct{}, 1)
	done := make(chan askResult, 1)
	go func() {
		r, err := env.Ask(req, judgeclient.OnHeld(func(*schemas.BreakGlassResponse) { held <- struct{}{} }))
		done <- askResult{r, err}
	}()
	select {
	case <-held:
	case r := <-done:
		t.Fatalf("not held: %+v, %v", r.resp, r.err)
	case <-ctx.Done():
		t.Fatal("never held")
	}
	return done
}

type askResult struct {
	resp *schemas.BreakGlassResponse
	err  error
}

// approvalsKV is the judge's approvals bucket.
func approvalsKV(ctx context.Context, t *testing.T, env *judgetest.Env) jetstream.KeyValue {
	t.Helper()
	topo, err := topology.OpenJudge(ctx, env.JS, topology.JudgeConfig{Namespace: bus.DefaultNamespace})
	if err != nil {
		t.Fatal(err)
	}
	return topo.Approvals
}

// Review finding 3: an approval is tied to what was approved. A tenant
// re-sends a held request's id with another problem after a person
// approved it (before the judge's re-published copy arrives): the judge
// runs the copy stored at hold time, never the swapped one.
func TestApprovalRunsStoredRequest(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(costly(2.5))
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()

	a := judgetest.Request("swap-1", "s-swap", "redesign the module boundaries ALPHAMARK")
	a.BudgetUSD = 3
	done := holdAndWait(ctx, t, env, a)

	// A person approves; the window before the judge's re-published copy
	// is made explicit by setting the record without re-publishing.
	kv := approvalsKV(ctx, t, env)
	key := bus.JudgeApprovalKey("acme", "swap-1")
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var rec schemas.BreakGlassApproval
	if err := schemas.Decode(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec.State, rec.DecidedBy, rec.DecidedAs = schemas.ApprovalApproved, "bob", "approver"
	data, err := schemas.Encode(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, key, data, e.Revision()); err != nil {
		t.Fatal(err)
	}

	// The tenant sends the same id with another problem and its own
	// message id (so deduplication does not stop it).
	b := judgetest.Request("swap-1", "s-swap", "redesign the whole platform BRAVOMARK")
	b.BudgetUSD = 3
	b.Files = []schemas.ContextFile{{Path: "docs/platform.md", Content: "# The whole platform BRAVOMARK\n"}}
	if data, err = schemas.Encode(b); err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.Publish(ctx, bus.DefaultNamespace.JudgeSubject("acme"), data, jetstream.WithMsgID("swap-1-b")); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.resp.Outcome != schemas.BreakGlassAnswered || r.resp.Approver != "bob" {
		t.Fatalf("answer %+v, %v", r.resp, r.err)
	}
	sent := env.Requests.String()
	if strings.Contains(sent, "BRAVOMARK") {
		t.Error("the content swapped in after the approval reached the panel")
	}
	if !strings.Contains(sent, "ALPHAMARK") {
		t.Error("the approved content never reached the panel")
	}
}

// Review finding 6: a request's fusion plugin may choose only models the
// judge's settings configure, and only a few of them.
func TestRequestModelsConfigured(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	for _, tt := range []struct {
		name   string
		plugin schemas.FusionPlugin
		want   string
	}{
		{"unknown panel model", schemas.FusionPlugin{ID: "fusion", AnalysisModels: []string{"m1", "openai/o1-pro"}}, "openai/o1-pro"},
		{"unknown judge model", schemas.FusionPlugin{ID: "fusion", Model: "openai/o1-pro"}, "not configured"},
		{"too many models", schemas.FusionPlugin{ID: "fusion", AnalysisModels: slices.Repeat([]string{"m1"}, judge.MaxRequestModels+1)}, "too many panel models"},
	} {
		req := judgetest.Request("models-"+strings.ReplaceAll(tt.name, " ", "-"), "s-models-"+strings.ReplaceAll(tt.name, " ", "-"), "a crash in the parser")
		req.Plugins = []schemas.FusionPlugin{tt.plugin}
		resp, err := env.Ask(req)
		if !errors.Is(err, judgeclient.ErrRefused) || !strings.Contains(resp.Reason, tt.want) {
			t.Errorf("%s: %v %+v, want refused with %q", tt.name, err, resp, tt.want)
		}
	}
	if n := env.Sim.Stats().Requests; n != 0 {
		t.Errorf("%d model calls for refused requests", n)
	}
	// Configured models may be chosen.
	req := judgetest.Request("models-ok", "s-models-ok", "a crash in the parser")
	req.Plugins = []schemas.FusionPlugin{{ID: "fusion", Model: "m3", AnalysisModels: []string{"m1", "m2"}}}
	if resp, err := env.Ask(req); err != nil || resp.Outcome != schemas.BreakGlassAnswered || resp.JudgeModel != "m3" {
		t.Fatalf("configured models: %+v, %v", resp, err)
	}
}
