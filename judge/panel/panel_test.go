package panel_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/judge/panel"
)

// fake answers by model: "ok-*" with its name, "fail" with an error
// holding a key, "slow" only when its context ends.
type fake struct {
	model  string
	closed *atomic.Int32
}

func (f fake) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	switch {
	case strings.HasPrefix(f.model, "ok"):
		return llm.Response{Choices: []llm.Choice{{Content: "answer of " + f.model}}, PromptTokens: 10, CompletionTokens: 5}, nil
	case f.model == "fail":
		return llm.Response{}, errors.New("401 from provider: key sk-proj-" + strings.Repeat("Ab3", 16) + " refused")
	default:
		<-ctx.Done()
		return llm.Response{}, ctx.Err()
	}
}

func (f fake) Close() { f.closed.Add(1) }

func newPanel(t *testing.T, made *atomic.Int32, closed *atomic.Int32) *panel.Panel {
	t.Helper()
	p, err := panel.New(panel.Config{
		Endpoint: func(model string) panel.Endpoint {
			if model == "nowhere" {
				return panel.Endpoint{Model: model}
			}
			return panel.Endpoint{BaseURL: "http://models.invalid/v1", Model: model}
		},
		NewCompleter: func(ep panel.Endpoint) (panel.Completer, error) {
			made.Add(1)
			return fake{model: ep.Model, closed: closed}, nil
		},
		Cost: func(model string, in, out int64) float64 { return float64(in+out) / 1000 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAsk: members are asked in parallel and reported in order: answers
// with their tokens and cost, a failure with its key redacted, a member
// past the deadline failed, a model with no endpoint failed; one client
// per model, closed by Close.
func TestAsk(t *testing.T) {
	t.Parallel()
	var made, closed atomic.Int32
	p := newPanel(t, &made, &closed)
	members := []string{"ok-a", "fail", "slow", "nowhere", "ok-b"}
	res := p.Ask(context.Background(), members, []llm.Message{{Role: "user", Content: "q"}}, 100, 200*time.Millisecond)
	if len(res) != len(members) {
		t.Fatalf("%d results", len(res))
	}
	for i, r := range res {
		if r.Model != members[i] || r.Role != panel.RolePanel {
			t.Errorf("result %d: model %s role %s", i, r.Model, r.Role)
		}
	}
	if !res[0].OK || res[0].Response != "answer of ok-a" || res[0].PromptTokens != 10 || res[0].CostUSD != 0.015 {
		t.Errorf("ok-a: %+v", res[0])
	}
	if res[1].OK || !strings.Contains(res[1].Error, "401") || strings.Contains(res[1].Error, "Ab3Ab3Ab3") {
		t.Errorf("fail: %+v (the key must be redacted)", res[1])
	}
	if res[2].OK || !strings.Contains(res[2].Error, "deadline") {
		t.Errorf("slow: %+v", res[2])
	}
	if res[3].OK || !strings.Contains(res[3].Error, "base_url") {
		t.Errorf("nowhere: %+v", res[3])
	}
	p.Ask(context.Background(), []string{"ok-a", "ok-b"}, nil, 100, time.Minute)
	if made.Load() != 4 { // ok-a, fail, slow, ok-b: once each
		t.Errorf("%d clients made, want 4", made.Load())
	}
	p.Close()
	if closed.Load() != 4 {
		t.Errorf("%d clients closed, want 4", closed.Load())
	}
}

// TestCallJudgeRole: a single call carries its role.
func TestCallJudgeRole(t *testing.T) {
	t.Parallel()
	var made, closed atomic.Int32
	p := newPanel(t, &made, &closed)
	res, text := p.Call(context.Background(), panel.RoleJudge, "ok-j", nil, 10)
	if res.Role != panel.RoleJudge || !res.OK || text != "answer of ok-j" {
		t.Errorf("%+v, %q", res, text)
	}
}

// TestReachableAndNew: a model with no base URL is named; a panel needs
// all of its config.
func TestReachableAndNew(t *testing.T) {
	t.Parallel()
	var made, closed atomic.Int32
	p := newPanel(t, &made, &closed)
	if err := p.Reachable("ok-a", "nowhere"); !errors.Is(err, panel.ErrNoEndpoint) || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("Reachable: %v", err)
	}
	if err := p.Reachable("ok-a"); err != nil {
		t.Errorf("Reachable: %v", err)
	}
	if _, err := panel.New(panel.Config{}); err == nil {
		t.Error("an empty config was taken")
	}
}
