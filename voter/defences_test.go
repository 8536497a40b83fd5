package voter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/voter"
)

// provider is a fake model provider (an OpenAI-compatible HTTP server): it
// records every chat-completions body it receives and answers with reply.
type provider struct {
	srv   *httptest.Server
	reply func(body map[string]any) (status int, out string)

	mu     sync.Mutex
	bodies []map[string]any
}

func newProvider(t *testing.T, reply func(body map[string]any) (int, string)) *provider {
	t.Helper()
	p := &provider{reply: reply}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		p.mu.Lock()
		p.bodies = append(p.bodies, body)
		p.mu.Unlock()
		status, out := p.reply(body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, out)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *provider) received() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]map[string]any(nil), p.bodies...)
}

// client is a model client for p, model "own-model", with short backoffs.
func (p *provider) client(t *testing.T) *llm.Client {
	t.Helper()
	c, err := llm.New(llm.Config{BaseURL: p.srv.URL + "/v1", Model: "own-model", BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// completion is a chat completion saying content, with the given usage.
func completion(content string, prompt, completionTokens int) string {
	c, _ := json.Marshal(content)
	return fmt.Sprintf(`{"id":"c1","object":"chat.completion","model":"own-model","choices":[`+
		`{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, c, prompt, completionTokens, prompt+completionTokens)
}

// sampleRequest is a first-step hanoi request for (tenant, job, step) with
// seed 700+step, changed by mut.
func sampleRequest(t *testing.T, tenant, job string, step int64, mut func(*schemas.SampleRequest)) schemas.SampleRequest {
	t.Helper()
	in, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	const epoch = 1_700_000_000_000
	req := schemas.SampleRequest{
		Header: schemas.NewHeader(schemas.KindSampleRequest), Tenant: tenant, JobID: job,
		Step: step, Epoch: epoch, Task: hanoi.Name, Params: in.Params(), State: in.Initial(), Temperature: 0.1, Seed: 700 + step,
		MaxOutputTokens: 750, Token: testToken, IssuedAt: time.Now().UTC(),
	}
	if mut != nil {
		mut(&req)
	}
	req.SampleID = schemas.SampleID(tenant, job, req.Step, req.Epoch, req.Index, req.Attempt)
	return req
}

// publish queues req on the samples stream, as a coordinator (or a forger
// on a fleet without authorization) would.
func publish(t *testing.T, env *fleettest.Env, req schemas.SampleRequest) {
	t.Helper()
	data, err := json.Marshal(&req)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: bus.DefaultNamespace.SampleSubject(req.Tenant, req.JobID), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, req.SampleID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.JS.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
}

// settled waits until the voters consumer holds nothing: every request
// acked, none to be redelivered.
func settled(t *testing.T, env *fleettest.Env) {
	t.Helper()
	fleettest.Eventually(t, 10*time.Second, func() bool {
		info := votersInfo(t, env)
		return info.NumAckPending == 0 && info.NumPending == 0
	}, "requests still pending: %+v", votersInfo(t, env))
	if info := votersInfo(t, env); info.NumRedelivered != 0 {
		t.Errorf("%d requests redelivered, want every one answered on its first delivery", info.NumRedelivered)
	}
}

// TestPolicyRefusedBeforeTheModel: finding 3 of issue 9. A forged sample
// request naming openai/o1-pro with max_tokens 200000 at temperature 1.9
// made a voter spend its own key on it. Now a request outside the voter's
// model policy is answered as the red flag "policy", naming what it asked,
// and the provider receives nothing of it; requests within the policy
// (the voter's own model, a model it allows) are sent as before.
func TestPolicyRefusedBeforeTheModel(t *testing.T) {
	t.Parallel()
	const tenant, job = "acme", "forged"
	env := fleettest.New(t)
	results := fleettest.Capture[schemas.SampleResult](env, bus.DefaultNamespace.ResultJobWildcard(tenant, job))
	prov := newProvider(t, func(map[string]any) (int, string) { return 200, completion(`move = [1, 0, 2]`, 10, 5) })
	v := env.StartVoter(prov.client(t), voter.Config{Model: "own-model", Concurrency: 2,
		Policy: voter.Policy{AllowModels: []string{"strong-model"}}})

	cases := []struct {
		step int64
		mut  func(*schemas.SampleRequest)
		says []string // the red flag's detail; nil: sent to the model
	}{
		{1, func(r *schemas.SampleRequest) {
			r.Model, r.MaxOutputTokens, r.Temperature = "openai/o1-pro", 200_000, 1.9
		},
			[]string{`model "openai/o1-pro" is not allowed`, "max_output_tokens 200000 is above the ceiling 4096", "temperature 1.9 is outside [0, 1]"}},
		{2, func(r *schemas.SampleRequest) { r.Model = "openai/o1-pro" }, []string{`model "openai/o1-pro" is not allowed`}},
		{3, func(r *schemas.SampleRequest) { r.MaxOutputTokens = 4097 }, []string{"max_output_tokens 4097"}},
		{4, func(r *schemas.SampleRequest) { r.Temperature = 1.01 }, []string{"temperature 1.01"}},
		{5, nil, nil}, // the voter's own model
		{6, func(r *schemas.SampleRequest) { r.Model = "strong-model" }, nil},
		{7, func(r *schemas.SampleRequest) { r.Model, r.MaxOutputTokens, r.Temperature = "own-model", 4096, 1 }, nil},
	}
	for _, c := range cases {
		publish(t, env, sampleRequest(t, tenant, job, c.step, c.mut))
	}
	fleettest.Eventually(t, 20*time.Second, func() bool { return len(results.All()) == len(cases) },
		"%d of %d requests answered", len(results.All()), len(cases))
	settled(t, env)

	byStep := map[int64]schemas.SampleResult{}
	for _, r := range results.All() {
		byStep[r.Step] = r
	}
	sent := map[float64]string{} // seed → model the provider was asked for
	for _, b := range prov.received() {
		seed, _ := b["seed"].(float64)
		model, _ := b["model"].(string)
		sent[seed] = model
	}
	for _, c := range cases {
		r := byStep[c.step]
		model, called := sent[float64(700+c.step)]
		if c.says == nil {
			if !called || r.RedFlag == schemas.RedFlagPolicy {
				t.Errorf("step %d: within the policy, but answered %+v (provider called: %v)", c.step, r, called)
			}
			continue
		}
		if called {
			t.Errorf("step %d: the provider received the refused request (model %q)", c.step, model)
		}
		if r.Outcome != schemas.OutcomeRedFlag || r.RedFlag != schemas.RedFlagPolicy || r.PromptTokens != 0 || r.CompletionTokens != 0 {
			t.Errorf("step %d: answered %+v, want the red flag %q", c.step, r, schemas.RedFlagPolicy)
		}
		for _, s := range c.says {
			if !strings.Contains(r.Detail, s) {
				t.Errorf("step %d: detail %q does not say %q", c.step, r.Detail, s)
			}
		}
	}
	if sent[705] != "own-model" || sent[706] != "strong-model" || sent[707] != "own-model" {
		t.Errorf("models asked for: %v", sent)
	}
	if len(prov.received()) != 3 {
		t.Errorf("the provider received %d requests, want the 3 within the policy", len(prov.received()))
	}
	if st := v.Stats(); st.PolicyRefused != 4 || st.ModelCalls != 3 || st.RedFlags < 4 {
		t.Errorf("voter stats %+v, want 4 refused by the policy and 3 model calls", st)
	}
}

// TestStickyBadRepliesRedFlagged: finding 7 of issue 9. A provider that
// answers a prompt, every time, with HTTP 200 and no choice, a body that
// is not JSON, or usage figures out of range had the request retried as
// transient for ever. Now, after the model client's BadResponseAttempts
// (3) tries, the request is answered as the red flag "empty", acked on its
// first delivery, and no usage figure of the reply reaches the result.
func TestStickyBadRepliesRedFlagged(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body string
	}{
		{"no choices", `{"id":"c1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}}`},
		{"not JSON", `<html><body>502 upstream sorry</body></html>`},
		{"negative usage", completion(`move = [1, 0, 2]`, -1_000_000, 7)},
		{"negative completion usage", completion(`move = [1, 0, 2]`, 10, -7)},
		{"absurd usage", completion(`move = [1, 0, 2]`, 10, llm.MaxUsageTokens+1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const tenant, job = "acme", "sticky"
			env := fleettest.New(t)
			results := fleettest.Capture[schemas.SampleResult](env, bus.DefaultNamespace.ResultJobWildcard(tenant, job))
			prov := newProvider(t, func(map[string]any) (int, string) { return 200, c.body })
			v := env.StartVoter(prov.client(t), voter.Config{Model: "own-model", Concurrency: 1})
			publish(t, env, sampleRequest(t, tenant, job, 1, nil))

			fleettest.Eventually(t, 20*time.Second, func() bool { return len(results.All()) == 1 },
				"no answer: the bad reply is still being retried (provider hit %d times)", len(prov.received()))
			settled(t, env)
			r := results.All()[0]
			if r.Outcome != schemas.OutcomeRedFlag || r.RedFlag != schemas.RedFlagEmpty || r.PromptTokens != 0 || r.CompletionTokens != 0 {
				t.Errorf("answered %+v, want the red flag %q with no usage", r, schemas.RedFlagEmpty)
			}
			if n := len(prov.received()); n != llm.DefaultBadResponseAttempts {
				t.Errorf("the provider was asked %d times, want %d", n, llm.DefaultBadResponseAttempts)
			}
			if st := v.Stats(); st.BadReplies != 1 || st.RedFlags != 1 {
				t.Errorf("voter stats %+v, want 1 bad reply answered as a red flag", st)
			}
		})
	}
}

// TestJudgeDropsUsageOutOfRange: a model that reports usage out of range
// (one that, unlike the llm client, does not check it) has its reply
// red-flagged "empty", and the figures never reach the result.
func TestJudgeDropsUsageOutOfRange(t *testing.T) {
	t.Parallel()
	in, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	req := &schemas.SampleRequest{State: in.Initial(), MaxOutputTokens: 750}
	for _, u := range [][2]int{{-5, 3}, {5, -3}, {llm.MaxUsageTokens + 1, 3}} {
		res := voter.Judge(in, req, llm.Response{Choices: []llm.Choice{{Content: "move = [1, 0, 2]", FinishReason: "stop"}},
			PromptTokens: u[0], CompletionTokens: u[1]})
		if res.Outcome != schemas.OutcomeRedFlag || res.RedFlag != schemas.RedFlagEmpty || res.PromptTokens != 0 || res.CompletionTokens != 0 {
			t.Errorf("usage %v: %+v, want the red flag empty without usage", u, res)
		}
	}
}

// TestBadStepMovesOn: a step whose every sample gets an unusable reply
// ends the job at its sample cap (red flags "empty") instead of stalling
// it, and a step where only some samples do is decided by the others.
// The model is the simulated one behind a proxy that spoils replies.
func TestBadStepMovesOn(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, maxSamples, badStep = 3, 2, 23, 6, 4
	env := fleettest.New(t)
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 1})
	seeds := fleettest.SeedTable(jobSeed, 1<<disks-1, 64)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body struct {
			Seed int64 `json:"seed"`
		}
		_ = json.Unmarshal(raw, &body)
		if pos, ok := seeds[body.Seed]; ok && (pos.Step == badStep || pos.Index == 1) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[]}`)
			return
		}
		out, err := http.Post(sim.URL()+strings.TrimPrefix(r.URL.Path, "/v1"), "application/json", bytes.NewReader(raw))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer out.Body.Close()
		w.Header().Set("Content-Type", out.Header.Get("Content-Type"))
		w.WriteHeader(out.StatusCode)
		_, _ = io.Copy(w, out.Body)
	}))
	t.Cleanup(proxy.Close)
	client := fleettest.SimClient(t, sim, llm.Config{BaseURL: proxy.URL + "/v1"})
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(client, voter.Config{Concurrency: 4})

	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.MaxSamplesPerStep = maxSamples
	env.Submit(&spec)
	rep := env.WaitFor(spec, 60*time.Second)
	if rep.State == schemas.StateSolved || rep.Steps != badStep {
		t.Errorf("job %s after %d steps (%s), want it ended at step %d", rep.State, rep.Steps, rep.Reason, badStep)
	}
	if n := rep.RedFlags[schemas.RedFlagEmpty]; n < maxSamples+badStep {
		t.Errorf("%d red flags empty, want the bad step's %d and one per earlier step (report %+v)", n, maxSamples, rep.Figures)
	}
}

// TestForgedDecidedNoticeIgnored: finding 2 of issue 9. One forged
// step-decided notice naming step 2^40, sent as the job's second step was
// asked for, made voters skip every request of the job until restarted. Now
// the voter ignores (and counts) a notice beyond the job's requested
// steps, and the job finishes with the golden trace.
func TestForgedDecidedNoticeIgnored(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed = 3, 2, 31
	env := fleettest.New(t)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), nil)
	env.StartCoordinator(coordinator.Config{})
	v := env.StartVoter(model, voter.Config{Concurrency: 4})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)

	// The forger watches the job's requests (anyone may, on a fleet
	// without authorization) and, once step 1 is asked for, claims step
	// 2^40 of the live epoch decided.
	var once sync.Once
	sub, err := env.NC.Subscribe(bus.DefaultNamespace.SampleSubject(spec.Tenant, spec.JobID), func(m *nats.Msg) {
		var req schemas.SampleRequest
		if schemas.Decode(m.Data, &req) != nil || req.Step < 1 {
			return
		}
		once.Do(func() {
			data, err := json.Marshal(&schemas.StepDecided{
				Header: schemas.NewHeader(schemas.KindStepDecided), Tenant: req.Tenant, JobID: req.JobID, Step: 1 << 40, Epoch: req.Epoch,
				VoteKey: "x", Votes: 2, Lead: 2, Samples: 2, Tally: []schemas.TallyEntry{{VoteKey: "x", Votes: 2}},
				DecidedAt: time.Now().UTC(),
			})
			if err == nil {
				err = env.NC.Publish(bus.DefaultNamespace.DecidedSubject(req.Tenant, req.JobID), data)
			}
			if err != nil {
				t.Errorf("forge: %v", err)
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	env.Submit(&spec)
	rep := env.WaitFor(spec, 30*time.Second)
	if rep.State != schemas.StateSolved || rep.TraceSHA256 != fleettest.GoldenTrace(disks) {
		t.Errorf("job %s (%s), trace %s: want solved with the golden trace", rep.State, rep.Reason, rep.TraceSHA256)
	}
	fleettest.Eventually(t, 10*time.Second, func() bool { return v.Stats().NoticesIgnored >= 1 },
		"the forged notice was never seen and ignored: %+v", v.Stats())
	if st := v.Stats(); st.Skipped != 0 {
		t.Errorf("voter stats %+v: requests skipped on the forged notice's word", st)
	}
}
