package judge_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// An answer is stored under its tenant's key and read only with it:
// another tenant asking for the same request id neither reads the first
// tenant's answer nor overwrites it, but gets an answer of its own.
func TestAnswersPerTenant(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	ns := bus.DefaultNamespace

	mine, err := env.Ask(judgetest.Request("same-id", "s1", "a nil pointer panic in the parser"))
	if err != nil || mine.Tenant != "acme" {
		t.Fatalf("acme's ask: %+v, %v", mine, err)
	}
	var got schemas.BreakGlassResponse
	if err := judgeclient.Answer(ctx, env.JS, ns, "acme", "same-id", &got); err != nil || got.AnsweredAt != mine.AnsweredAt {
		t.Errorf("acme reads its own answer: %+v, %v", got, err)
	}
	err = judgeclient.Answer(ctx, env.JS, ns, "beta", "same-id", &got)
	if !errors.Is(err, judgeclient.ErrNoAnswer) || !strings.Contains(err.Error(), `no request "same-id" of tenant beta`) {
		t.Errorf("beta reads acme's id: %v, want ErrNoAnswer", err)
	}

	// beta asks with acme's id: its own request, answered on its own.
	before := env.Sim.Stats().Requests
	other := judgetest.Request("same-id", "s1", "a deadlock in the scheduler")
	other.Tenant = "beta"
	theirs, err := env.Ask(other)
	if err != nil || theirs.Tenant != "beta" || theirs.AnsweredAt.Equal(mine.AnsweredAt) || !strings.Contains(theirs.Diagnosis, "deadlock") {
		t.Fatalf("beta's ask with acme's id: %+v, %v; want beta's own answer", theirs, err)
	}
	if env.Sim.Stats().Requests == before {
		t.Error("beta's request was not run: it was given acme's stored answer")
	}
	if err := judgeclient.Answer(ctx, env.JS, ns, "acme", "same-id", &got); err != nil || got.Tenant != "acme" || got.AnsweredAt != mine.AnsweredAt {
		t.Errorf("acme's answer after beta's: %+v, %v", got, err)
	}
	// The bucket holds one key a tenant, none named by the id alone.
	topo, err := topology.OpenJudge(ctx, env.JS, topology.JudgeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"acme.same-id": true, "beta.same-id": true, "same-id": false} {
		if _, err := topo.Answers.Get(ctx, key); (err == nil) != want {
			t.Errorf("key %s: %v, want present %v", key, err, want)
		}
	}
}

// The subject proves the tenant: a request on beta's subject that names
// acme in its body is refused, and its refusal is beta's, not acme's.
func TestForgedTenantRefused(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	ns := bus.DefaultNamespace
	topo, err := topology.OpenJudge(ctx, env.JS, topology.JudgeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := topo.Answers.Watch(ctx, bus.JudgeAnswerKey("beta", "forged"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	data, err := schemas.Encode(judgetest.Request("forged", "s1", "a crash in the parser")) // tenant acme
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.Publish(ctx, ns.JudgeSubject("beta"), data); err != nil {
		t.Fatal(err)
	}
	var resp schemas.BreakGlassResponse
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		if err := schemas.Decode(e.Value(), &resp); err != nil {
			t.Fatal(err)
		}
		break
	}
	if resp.Outcome != schemas.BreakGlassRefused || resp.Tenant != "beta" || !strings.Contains(resp.Reason, `names tenant "acme" but came on tenant "beta"'s subject`) {
		t.Errorf("forged request: %+v", resp)
	}
	if _, err := topo.Answers.Get(ctx, bus.JudgeAnswerKey("acme", "forged")); err == nil {
		t.Error("the forged request wrote an answer under acme's key")
	}
	if n := env.Sim.Stats().Requests; n != 0 {
		t.Errorf("the forged request reached the model %d times", n)
	}
}

// Limits a client cannot reset: a new session does not reset the
// tenant's calls over its window, and deleting (or purging) the counters
// in the sessions bucket resets neither the session's nor the tenant's:
// a missing key is rebuilt from the audit trail.
func TestLimitsNotResettable(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	s := judgetest.TestSettings()
	s.TenantInvocations = 4
	env.StartJudge(s)
	env.StartJudge(s)
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	topo, err := topology.OpenJudge(ctx, env.JS, topology.JudgeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(id, session string) (*schemas.BreakGlassResponse, error) {
		t.Helper()
		return env.Ask(judgetest.Request(id, session, "a crash in the parser"))
	}
	refused := func(id, session, want string) {
		t.Helper()
		resp, err := ask(id, session)
		if !errors.Is(err, judgeclient.ErrRefused) || !strings.Contains(resp.Reason, want) {
			t.Errorf("%s in %s: %v; want refused with %q", id, session, err, want)
		}
	}
	for i, id := range []string{"a1", "a2", "a3"} {
		if _, err := ask(id, "s1"); err != nil {
			t.Fatalf("call %d of s1: %v", i+1, err)
		}
	}
	refused("a4", "s1", "session limit: 3 of 3")

	// Deleting the session's counters gives it nothing back.
	if err := topo.Sessions.Delete(ctx, bus.JudgeSessionKey("acme", "s1")); err != nil {
		t.Fatal(err)
	}
	refused("a5", "s1", "session limit: 3 of 3")

	// A new session: the tenant's fourth call in its window runs, the
	// fifth is refused whatever the session.
	if _, err := ask("b1", "s2"); err != nil {
		t.Fatalf("the tenant's fourth call: %v", err)
	}
	refused("b2", "s2", "tenant limit: 4 of 4 judge calls (break glass and arbitrations) already made in the tenant's last 24h0m0s")
	refused("c1", "s3", "tenant limit: 4 of 4")

	// Deleting or purging the tenant's counters gives it nothing back.
	if err := topo.Sessions.Delete(ctx, bus.JudgeTenantKey("acme")); err != nil {
		t.Fatal(err)
	}
	refused("c2", "s3", "tenant limit: 4 of 4")
	if err := topo.Sessions.Purge(ctx, bus.JudgeTenantKey("acme")); err != nil {
		t.Fatal(err)
	}
	if err := topo.Sessions.Purge(ctx, bus.JudgeSessionKey("acme", "s3")); err != nil {
		t.Fatal(err)
	}
	refused("c3", "s3", "tenant limit: 4 of 4")

	// Another tenant has limits of its own.
	other := judgetest.Request("beta-1", "s1", "a crash in the parser")
	other.Tenant = "beta"
	if _, err := env.Ask(other); err != nil {
		t.Errorf("another tenant: %v", err)
	}
}
