package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

// waitForPerson has tenant/id's owner report its open step (3) on the
// judge's panel, paused: the step waits for a person.
func (e *apiEnv) waitForPerson(ctx context.Context, tenant, id string) {
	e.t.Helper()
	st := schemas.JobStatus{Header: schemas.NewHeader(schemas.KindJobStatus), Tenant: tenant, JobID: id,
		State: schemas.StatePaused, Steps: 3, TotalSteps: 7, Rung: schemas.RungPanel, UpdatedAt: time.Now().UTC()}
	data, err := schemas.Encode(&st)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.fleet.Topo.Status.Put(ctx, bus.JobKey(tenant, id), data); err != nil {
		e.t.Fatal(err)
	}
}

// TestDecideOnlyApprovers (issue 19, item 7): only a person decides over
// HTTP, as over NATS. A plain tenant key is 403 and nothing is decided; a
// body naming who decides is 422; an approver key decides its own
// tenant's job (another tenant's is 404) as its name, which the decision
// sent to the coordinators carries; an admin key decides any tenant's, as
// its prefix when it has no name.
func TestDecideOnlyApprovers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topo := e.fleet.Topo
	// The coordinators' decide service, as it answers (jobs.Decide on the
	// subject's job), remembering who each decision names.
	var (
		mu  sync.Mutex
		bys []string
	)
	sub, err := e.fleet.NC.Subscribe(topo.NS.DecideWildcard(), func(m *nats.Msg) {
		var req schemas.DecideRequest
		if err := schemas.Decode(m.Data, &req); err != nil {
			t.Errorf("decide request %s: %v", m.Data, err)
			return
		}
		mu.Lock()
		bys = append(bys, req.By)
		mu.Unlock()
		_, tenant, job, _ := topo.NS.ParseControlSubject(m.Subject)
		rec, err := jobs.Decide(ctx, topo, tenant, job, req.Decision())
		data, _ := schemas.Encode(jobs.Reply(tenant, job, jobs.Outcome{Record: rec, Changed: err == nil}, err))
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	a := e.submit(alpha, hanoi(3))
	b := e.submit(beta, hanoi(3))
	e.waitForPerson(ctx, alpha, a.ID)
	e.waitForPerson(ctx, beta, b.ID)
	path := "/v1/jobs/" + a.ID + "/decide"
	answer := `{"step":3,"answer":"a move"}`
	decided := func(tenant, id string) *schemas.PersonDecision {
		t.Helper()
		rec, _, err := jobs.Get(ctx, topo, tenant, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Decision
	}

	// A tenant key names a person: refused, whoever it names.
	for _, body := range []string{answer, `{"step":3,"answer":"a move","by":"alice"}`} {
		p := e.json(http.MethodPost, path, e.key[alpha], body).problem(t, http.StatusForbidden, api.TypeForbidden)
		if !strings.Contains(p.Detail, "approver key") {
			t.Errorf("tenant key: %q, want it to say an approver key decides", p.Detail)
		}
	}
	// The approver's key cannot say someone else decided.
	p := e.json(http.MethodPost, path, e.key[alice], `{"step":3,"answer":"a move","by":"bob"}`).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
	if len(p.Errors) != 1 || p.Errors[0].Path != "/by" || !strings.Contains(p.Detail, "alice") {
		t.Errorf("by in the body: %+v, want /by refused, naming the key's name", p)
	}
	// Nor reach another tenant's job.
	e.json(http.MethodPost, "/v1/jobs/"+b.ID+"/decide?tenant="+beta, e.key[alice], answer).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodPost, "/v1/jobs/"+b.ID+"/decide", e.key[alice], answer).problem(t, http.StatusNotFound, api.TypeNotFound)
	if d := decided(alpha, a.ID); d != nil {
		t.Fatalf("a refused decision was recorded: %+v", d)
	}
	if d := decided(beta, b.ID); d != nil {
		t.Fatalf("a refused decision was recorded for beta: %+v", d)
	}

	var cr schemas.ControlResult
	e.json(http.MethodPost, path, e.key[alice], answer).decode(t, http.StatusOK, &cr)
	if d := decided(alpha, a.ID); cr.ID != a.ID || d == nil || d.By != alice || d.Step != 3 {
		t.Errorf("approver's decision: %+v, recorded %+v; want step 3 by %s", cr, d, alice)
	}
	// The admin key decides beta's job, as its prefix (it has no name).
	adminP, err := e.keys.Authenticate(ctx, e.admin)
	if err != nil {
		t.Fatal(err)
	}
	e.json(http.MethodPost, "/v1/jobs/"+b.ID+"/decide?tenant="+beta, e.admin, answer).decode(t, http.StatusOK, &cr)
	if d := decided(beta, b.ID); d == nil || d.By != schemas.APIKeyPrefix+adminP.KeyID {
		t.Errorf("admin's decision recorded %+v, want by %s", d, apikey.Principal{KeyID: adminP.KeyID}.Person())
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{alice, schemas.APIKeyPrefix + adminP.KeyID}; strings.Join(bys, ",") != strings.Join(want, ",") {
		t.Errorf("the decisions sent on NATS named %q, want %q", bys, want)
	}
}
