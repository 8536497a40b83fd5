package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
)

// securedEnv is an API server on a secured fleet (internal/auth/authtest:
// a nats-server with the auth.conf maker auth init writes), connected as
// maker serve is, on the api identity; the admin made the topology and a
// key per tenant.
type securedEnv struct {
	*apiEnv
	srv   *authtest.Server
	admin jetstream.JetStream
	topo  *topology.Topology // the admin's
}

func newSecuredEnv(t *testing.T, cfg api.Config) *securedEnv {
	t.Helper()
	srv := authtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := jetstream.New(srv.Connect(t, auth.Admin).Conn)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.Ensure(ctx, admin, topology.Config{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	apiConn := srv.Connect(t, auth.API)
	apiTopo := openAs(ctx, t, apiConn)
	keys := apikey.New(apiTopo)
	kctx, kcancel := context.WithCancel(context.Background())
	t.Cleanup(kcancel)
	if err := keys.Start(kctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(keys.Stop)
	e := &apiEnv{t: t, keys: keys, key: map[string]string{}}
	for _, tn := range []string{alpha, beta} {
		k, _, err := apikey.New(topo).Create(ctx, apikey.CreateOptions{Tenant: tn, Name: tn})
		if err != nil {
			t.Fatal(err)
		}
		e.key[tn] = k
	}
	if e.srv, err = api.New(api.Deps{NC: apiConn.Conn, Topo: apiTopo, Tasks: builtin.Registry(), Auth: keys}, cfg); err != nil {
		t.Fatal(err)
	}
	e.http = httptest.NewServer(e.srv)
	t.Cleanup(func() {
		e.srv.CloseStreams()
		e.http.Close()
	})
	t.Cleanup(func() {
		for _, v := range apiConn.Violations() {
			t.Logf("the api identity was refused: %v", v)
		}
	})
	return &securedEnv{apiEnv: e, srv: srv, admin: admin, topo: topo}
}

// openAs binds the fleet's topology on c's identity, as maker serve does.
func openAs(ctx context.Context, t *testing.T, c *authtest.Conn) *topology.Topology {
	t.Helper()
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.Open(ctx, js, topology.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// register registers tenant/id (queued) as maker serve does.
func (s *securedEnv) register(ctx context.Context, tenant, id string) {
	s.t.Helper()
	spec := schemas.JobSpec{Header: schemas.NewHeader(schemas.KindJobSpec), Tenant: tenant, JobID: id, Task: "hanoi",
		Params: []byte(`{"disks": 3}`), K: 2}
	spec.ApplyDefaults()
	rec := schemas.JobRecord{Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: tenant, JobID: id, Spec: spec,
		Control: schemas.ControlRun, State: schemas.StateQueued, UpdatedAt: time.Now().UTC()}
	if err := jobs.Register(ctx, s.topo, &rec); err != nil {
		s.t.Fatal(err)
	}
}

// TestJobStepsSecured (issue 19, item 9): on a secured fleet the step
// feed works for maker serve's identity: the journal's entries of the
// job, then each new one.
func TestJobStepsSecured(t *testing.T) {
	t.Parallel()
	s := newSecuredEnv(t, api.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.register(ctx, alpha, "j1")
	j, _, err := journal.Open(ctx, s.admin, s.topo.NS, alpha, "j1")
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	write := func(n int) {
		for range n {
			step := int64(len(seqs))
			seq, err := j.Append(ctx, &schemas.JournalEntry{Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: alpha, JobID: "j1",
				Type: schemas.EntryDecision, Token: 1, Owner: "c1", Step: step, Epoch: schemas.EpochsPerLease,
				VoteKey: fmt.Sprintf("move-%d", step), Votes: 2, Lead: 2, Valid: 2, Counted: 2, At: time.Now().UTC()})
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
	}
	write(5)
	sctx, scancel := context.WithTimeout(ctx, 15*time.Second)
	defer scancel()
	evs := s.stream(sctx, "/v1/jobs/j1/steps", s.key[alpha])
	if got := nextSteps(t, evs, 5); fmt.Sprint(got) != fmt.Sprint(seqs) {
		t.Errorf("steps %v, want %v", got, seqs)
	}
	write(2)
	if got := nextSteps(t, evs, 2); fmt.Sprint(got) != fmt.Sprint(seqs[5:]) {
		t.Errorf("new steps %v, want %v", got, seqs[5:])
	}
}

// oneKey authenticates every request as tenant's key "k".
type oneKey string

func (t oneKey) Authenticate(context.Context, string) (apikey.Principal, error) {
	return apikey.Principal{KeyID: "k", Tenant: string(t)}, nil
}

// TestJobStepsDenied (issue 19, item 9): a server whose NATS identity may
// not read the journal (here the approver's, which may read job records,
// statuses and reports, not the journal) answers the step feed with a
// clear 503 problem at once, instead of hanging until its timeout.
func TestJobStepsDenied(t *testing.T) {
	t.Parallel()
	s := newSecuredEnv(t, api.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.register(ctx, alpha, "j1")
	conn := s.srv.Connect(t, auth.Approver)
	srv, err := api.New(api.Deps{NC: conn.Conn, Topo: openAs(ctx, t, conn), Tasks: builtin.Registry(), Auth: oneKey(alpha)}, api.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.CloseStreams()
		ts.Close()
	})
	e := &apiEnv{t: t, http: ts}
	for _, q := range []string{"", "?tail=0", "?after=3"} {
		start := time.Now()
		p := e.json(http.MethodGet, "/v1/jobs/j1/steps"+q, "any", nil).problem(t, http.StatusServiceUnavailable, api.TypeUnavailable)
		if took := time.Since(start); took > 10*time.Second || !strings.Contains(p.Detail, "may not read the jobs' journal") {
			t.Errorf("%q: answered after %v with %q; want at once, saying the journal may not be read", q, took, p.Detail)
		}
	}
}
