package providers_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/providers"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// startSim is a simulated model over HTTP.
func startSim(t *testing.T, cfg simllm.Config) string {
	t.Helper()
	s, err := simllm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts.URL
}

func dep(name, baseURL, model string) schemas.Deployment {
	return schemas.Deployment{Name: name, BaseURL: baseURL, Model: model}
}

// clock is a settable clock for the breakers.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newRouter(t *testing.T, model string, clk *clock, ds ...schemas.Deployment) *providers.Router {
	t.Helper()
	cfg := providers.Config{
		Model: model, Source: providers.StaticSource(ds),
		LLM: llm.Config{MaxAttempts: 2, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond},
	}
	if clk != nil {
		cfg.Now = clk.now
	}
	r, err := providers.NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func ask(content string) llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: "user", Content: content}}, MaxTokens: 16, Temperature: 0.1}
}

func stateOf(r *providers.Router, name string) providers.Status {
	for _, s := range r.Status() {
		if s.Name == name {
			return s
		}
	}
	return providers.Status{}
}

// TestFailover: a deployment that goes down is taken out and the other
// serving the model answers every call, the same answers; once its
// cooldown passes one trial call goes to it, and it is back.
func TestFailover(t *testing.T) {
	t.Parallel()
	sim := startSim(t, simllm.Config{Seed: 5})
	a := testkit.StartFlaky(t, sim)
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	r := newRouter(t, "sim-1", clk, dep("a", a.URL(), "sim-1"), dep("b", sim+"/v1", "sim-1"))
	ctx := context.Background()

	want := map[string]string{}
	for i := range 6 {
		p := strings.Repeat("x", i+1)
		resp, err := r.Complete(ctx, ask(p))
		if err != nil {
			t.Fatal(err)
		}
		want[p] = resp.Choices[0].Content
	}
	if a.Calls.Load() == 0 {
		t.Fatal("no call went to deployment a while both were up")
	}

	a.Down.Store(true)
	for p, w := range want {
		resp, err := r.Complete(ctx, ask(p))
		if err != nil {
			t.Fatalf("a call while one of two deployments is down: %v", err)
		}
		if got := resp.Choices[0].Content; got != w {
			t.Errorf("answer to %q changed with the deployment: %q, want %q", p, got, w)
		}
	}
	st := stateOf(r, "a")
	if st.State != "out" || !strings.Contains(st.Reason, "503") {
		t.Errorf("deployment a: %+v, want out, naming the 503", st)
	}
	// Out: no call reaches it until its cooldown passes.
	before := a.Calls.Load()
	for range 5 {
		if _, err := r.Complete(ctx, ask("again")); err != nil {
			t.Fatal(err)
		}
	}
	if a.Calls.Load() != before {
		t.Errorf("%d calls reached deployment a while it was out", a.Calls.Load()-before)
	}
	if err := r.Ready(); err != nil {
		t.Errorf("Ready with one deployment of two up: %v", err)
	}

	// Back up, past its cooldown: the trial call goes to it and it is in.
	a.Down.Store(false)
	clk.add(providers.DefaultCooldown + time.Millisecond)
	for range 4 {
		if _, err := r.Complete(ctx, ask("back")); err != nil {
			t.Fatal(err)
		}
	}
	if st := stateOf(r, "a"); st.State != "ok" || a.Calls.Load() == before {
		t.Errorf("deployment a after its cooldown: %+v, %d calls; want ok and called", st, a.Calls.Load()-before)
	}
}

// TestAllOut: with every deployment of the model down, a call is handed
// back to be retried when the first is due back; Ready says why.
func TestAllOut(t *testing.T) {
	t.Parallel()
	sim := startSim(t, simllm.Config{})
	a := testkit.StartFlaky(t, sim)
	a.Down.Store(true)
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	r := newRouter(t, "sim-1", clk, dep("a", a.URL(), "sim-1"))
	ctx := context.Background()
	_, err := r.Complete(ctx, ask("x"))
	if !errors.Is(err, llm.ErrRetryBudget) {
		t.Fatalf("first call to a down deployment: %v, want the client's retry budget", err)
	}
	_, err = r.Complete(ctx, ask("x"))
	var later *llm.RetryLaterError
	if !errors.As(err, &later) || !errors.Is(err, providers.ErrUnavailable) || later.Delay <= 0 || later.Delay > providers.DefaultCooldown {
		t.Fatalf("call while every deployment is out: %v, want ErrUnavailable to retry within the cooldown", err)
	}
	if err := r.Ready(); !errors.Is(err, providers.ErrUnavailable) || !strings.Contains(err.Error(), "503") {
		t.Errorf("Ready: %v, want unavailable naming the provider's answer", err)
	}
}

// TestWrongModelFailsOver: a deployment whose provider does not serve
// the model (404) is taken out like a down one; the other serves.
func TestWrongModelFailsOver(t *testing.T) {
	t.Parallel()
	wrong := startSim(t, simllm.Config{Models: []string{"other"}, Model: "other"})
	right := startSim(t, simllm.Config{})
	r := newRouter(t, "sim-1", nil, dep("a", wrong+"/v1", "sim-1"), dep("b", right+"/v1", "sim-1"))
	for range 4 {
		if _, err := r.Complete(context.Background(), ask("x")); err != nil {
			t.Fatal(err)
		}
	}
	if st := stateOf(r, "a"); st.State != "out" || !strings.Contains(st.Reason, "404") {
		t.Errorf("deployment a: %+v, want out with the 404", st)
	}
}

// TestNoDeploymentIsTheFleets: a model no deployment serves, and a
// deployment whose key is missing on this voter, are the fleet's
// configuration (llm.ErrProvider: handed back, never answered).
func TestNoDeploymentIsTheFleets(t *testing.T) {
	t.Parallel()
	sim := startSim(t, simllm.Config{})
	keyed := dep("keyed", sim+"/v1", "sim-1")
	keyed.APIKeyEnv = "MAKERFLEET_TEST_UNSET_API_KEY"
	r := newRouter(t, "sim-1", nil, keyed)
	_, err := r.Complete(context.Background(), llm.Request{Model: "gpt-nope", Messages: []llm.Message{{Role: "user", Content: "x"}}})
	if !errors.Is(err, llm.ErrProvider) || !errors.Is(err, providers.ErrNoDeployment) || !strings.Contains(err.Error(), "gpt-nope") {
		t.Errorf("a model no deployment serves: %v", err)
	}
	_, err = r.Complete(context.Background(), ask("x"))
	if !errors.Is(err, llm.ErrProvider) || !strings.Contains(err.Error(), "$MAKERFLEET_TEST_UNSET_API_KEY") {
		t.Errorf("the only deployment without its key: %v", err)
	}
	if err := r.Ready(); err == nil || !strings.Contains(err.Error(), "MAKERFLEET_TEST_UNSET_API_KEY") {
		t.Errorf("Ready: %v, want the missing key named", err)
	}
	if st := stateOf(r, "keyed"); st.State != "no_key" {
		t.Errorf("status %+v, want no_key", st)
	}
}

// TestKeyAndUpstreamModel: the key comes from the variable the record
// names, and the provider is asked its own name for the model.
func TestKeyAndUpstreamModel(t *testing.T) {
	sim := startSim(t, simllm.Config{APIKey: "sk-test-123", Models: []string{"azure-dep-7"}, Model: "azure-dep-7"})
	t.Setenv("MAKERFLEET_TEST_API_KEY", "sk-test-123")
	d := dep("azure", sim+"/v1", "gpt-4.1-mini")
	d.ProviderModel = "azure-dep-7"
	d.APIKeyEnv = "MAKERFLEET_TEST_API_KEY"
	r := newRouter(t, "gpt-4.1-mini", nil, d)
	resp, err := r.Complete(context.Background(), ask("x"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "azure-dep-7" {
		t.Errorf("the provider was asked %q, want its own name azure-dep-7", resp.Model)
	}
}

// TestRegistryChangeApplies: a router over a changing source picks up a
// new deployment at its next call, and drops a removed one.
func TestRegistryChangeApplies(t *testing.T) {
	t.Parallel()
	sim := startSim(t, simllm.Config{})
	var (
		mu  sync.Mutex
		ds  = []schemas.Deployment{}
		sig = make(chan struct{})
	)
	src := func() ([]schemas.Deployment, <-chan struct{}) {
		mu.Lock()
		defer mu.Unlock()
		return append([]schemas.Deployment(nil), ds...), sig
	}
	set := func(v []schemas.Deployment) {
		mu.Lock()
		ds = v
		close(sig)
		sig = make(chan struct{})
		mu.Unlock()
	}
	r, err := providers.NewRouter(providers.Config{Model: "sim-1", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Complete(context.Background(), ask("x")); !errors.Is(err, providers.ErrNoDeployment) {
		t.Fatalf("empty registry: %v", err)
	}
	set([]schemas.Deployment{dep("a", sim+"/v1", "sim-1")})
	if _, err := r.Complete(context.Background(), ask("x")); err != nil {
		t.Fatalf("after the deployment was added: %v", err)
	}
	d := dep("a", sim+"/v1", "sim-1")
	d.Disabled = true
	set([]schemas.Deployment{d})
	if _, err := r.Complete(context.Background(), ask("x")); !errors.Is(err, providers.ErrNoDeployment) {
		t.Fatalf("after the deployment was disabled: %v", err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := startSim(t, simllm.Config{Models: []string{"sim-2"}})
	anyName := startSim(t, simllm.Config{Models: []string{simllm.AnyModel}})
	tmpl := llm.Config{MaxAttempts: 1}
	for _, tc := range []struct {
		name string
		d    schemas.Deployment
		ok   bool
		want string
	}{
		{"listed", dep("a", sim+"/v1", "sim-2"), true, "lists"},
		{"served, not listed", dep("b", anyName+"/v1", "unlisted-9"), true, "one-token call"},
		{"not served", dep("c", sim+"/v1", "gpt-nope"), false, "404"},
		{"down", dep("d", "http://127.0.0.1:1/v1", "sim-1"), false, "GET /models"},
		{"no key", schemas.Deployment{Name: "e", BaseURL: sim + "/v1", Model: "sim-2", APIKeyEnv: "MAKERFLEET_TEST_UNSET_API_KEY"}, false, "not set"},
	} {
		res := providers.Check(ctx, tc.d, providers.KeySource{}, tmpl)
		if res.OK != tc.ok || !strings.Contains(res.Detail, tc.want) {
			t.Errorf("%s: %+v, want ok %v with %q", tc.name, res, tc.ok, tc.want)
		}
	}
}
