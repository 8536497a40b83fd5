package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/quota"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/webhook"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Tenants of every test's fleet; ops holds the admin key; alice is a
// person, alpha's approver (e.key[alice] is her approver key).
const (
	alpha = "alpha"
	beta  = "beta"
	ops   = "ops"
	alice = "alice"
)

// apiEnv is one test's API server on a fleet (fleettest: real
// nats-server and redis-server), with a key per tenant.
type apiEnv struct {
	t     *testing.T
	fleet *fleettest.Env
	srv   *api.Server
	http  *httptest.Server
	keys  *apikey.Store
	// key holds each tenant's plaintext key; admin is ops's admin key.
	key   map[string]string
	admin string
}

// options change newEnv's server.
type options struct {
	cfg api.Config
	// run starts a coordinator and a voter on the simulated model.
	run bool
	// forecast is the server's forecaster (nil: none).
	forecast api.Forecaster
	// setup runs before the roles start (quotas they should start with).
	setup func(*apiEnv)
	// batches wraps the server's batch store (nil: the store itself).
	batches func(api.Batches) api.Batches
	// webhooks, when set, has the server show webhook secrets (the master
	// kept in the fleet's bucket) and a deliverer with this config run
	// beside it, unless noDeliverer (the test starts one: runDeliverer).
	webhooks    *webhook.Config
	noDeliverer bool
}

func newEnv(t *testing.T, o options) *apiEnv {
	t.Helper()
	f := fleettest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	keys := apikey.New(f.Topo)
	if err := keys.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(keys.Stop)
	e := &apiEnv{t: t, fleet: f, keys: keys, key: map[string]string{}}
	for _, tn := range []string{alpha, beta} {
		k, _, err := keys.Create(ctx, apikey.CreateOptions{Tenant: tn, Name: tn + " test key"})
		if err != nil {
			t.Fatal(err)
		}
		e.key[tn] = k
	}
	k, _, err := keys.Create(ctx, apikey.CreateOptions{Tenant: alpha, Approver: true, Name: alice})
	if err != nil {
		t.Fatal(err)
	}
	e.key[alice] = k
	if k, _, err = keys.Create(ctx, apikey.CreateOptions{Tenant: ops, Admin: true}); err != nil {
		t.Fatal(err)
	}
	e.admin = k
	quotas := quota.New(f.Topo)
	if err := quotas.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rdb := f.Redis().Client(t)
	budgets, err := store.NewBudgets(rdb, store.BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Logger == nil {
		o.cfg.Logger = f.Log
	}
	var batches api.Batches = batch.NewStore(f.Topo, taskreg.New(f.Topo.Tasks, f.Tasks, taskspec.CompileSpec))
	if o.batches != nil {
		batches = o.batches(batches)
	}
	deps := api.Deps{
		NC: f.NC, Topo: f.Topo, Tasks: f.Tasks, Auth: keys, Quotas: quotas, Forecast: o.forecast,
		Budgets: budgets, Inflight: store.NewLimiter(rdb, store.DefaultKeyPrefix), Batches: batches,
	}
	if o.webhooks != nil {
		deps.WebhookSecret = e.startWebhooks(ctx, *o.webhooks, !o.noDeliverer)
	}
	e.srv, err = api.New(deps, o.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.http = httptest.NewServer(e.srv)
	t.Cleanup(func() {
		e.srv.CloseStreams()
		e.http.Close()
	})
	if o.setup != nil {
		o.setup(e)
	}
	if o.run {
		sim := fleettest.StartSim(t, simllm.Config{Accuracy: 0.99, Seed: 3})
		f.StartCoordinator(coordinator.Config{})
		f.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 8})
	}
	return e
}

// price sets model's price ("default": the default record) through the
// admin's key.
func (e *apiEnv) price(model string, in, out float64) schemas.ModelPrice {
	e.t.Helper()
	var p schemas.ModelPrice
	e.json(http.MethodPut, "/v1/prices/"+url.PathEscape(model), e.admin,
		schemas.ModelPrice{InputUSDPerMTok: in, OutputUSDPerMTok: out}).decode(e.t, http.StatusOK, &p)
	return p
}

// reply is an answer read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with key ("" for none) and reads the answer.
func (e *apiEnv) do(method, path, key, contentType string, body io.Reader) reply {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// json sends v as a JSON body ("" for none).
func (e *apiEnv) json(method, path, key string, v any) reply {
	e.t.Helper()
	if v == nil {
		return e.do(method, path, key, "", nil)
	}
	b, ok := v.(string)
	if !ok {
		raw, err := json.Marshal(v)
		if err != nil {
			e.t.Fatal(err)
		}
		b = string(raw)
	}
	return e.do(method, path, key, "application/json", strings.NewReader(b))
}

// decode reads r's body into v, failing the test on another status.
func (r reply) decode(t *testing.T, status int, v any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("answer %s: %v", r.body, err)
	}
}

// problem checks that r is a problem of status and type and returns it.
func (r reply) problem(t *testing.T, status int, typ string) schemas.Problem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json (%s)", ct, r.body)
	}
	var p schemas.Problem
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem %s: %v", r.body, err)
	}
	if p.Status != status || p.Type != api.ProblemBase+typ || p.Title == "" {
		t.Fatalf("problem %+v, want status %d type %s", p, status, typ)
	}
	return p
}

// submit submits req as tenant and returns the answer.
func (e *apiEnv) submit(tenant string, req schemas.JobRequest) schemas.JobCreated {
	e.t.Helper()
	var c schemas.JobCreated
	e.json(http.MethodPost, "/v1/jobs", e.key[tenant], req).decode(e.t, http.StatusCreated, &c)
	return c
}

// hanoi is a request for a disks-disk hanoi job.
func hanoi(disks int) schemas.JobRequest {
	return schemas.JobRequest{Task: "hanoi", Params: json.RawMessage(`{"disks":` + itoa(disks) + `}`), K: 2, Seed: 7}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// enqueued is what the fleet holds of submitted jobs: registered jobs of
// every tenant and the job stream's last sequence.
func (e *apiEnv) enqueued() (registered int, lastSeq uint64) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := jobs.List(ctx, e.fleet.Topo, "")
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := e.fleet.JS.Stream(ctx, e.fleet.Topo.NS.JobsStream())
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(recs), info.State.LastSeq
}

// newBareServer is a server on a topology without keys, roles or Redis:
// for tests of routing alone.
func newBareServer(t *testing.T) *api.Server {
	t.Helper()
	js, topo := testkit.StartTopology(t)
	keys := apikey.New(topo)
	srv, err := api.New(api.Deps{NC: js.Conn(), Topo: topo, Tasks: builtin.Registry(), Auth: keys}, api.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.CloseStreams)
	return srv
}
