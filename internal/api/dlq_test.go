package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestDeadLettersThroughAPI: a tenant lists its own dead letters through
// maker serve (it has no NATS identity to read the stream with), never
// another's; an admin key lists any tenant's or every tenant's.
func TestDeadLettersThroughAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := e.fleet.Topo.NS
	for i, ref := range []struct{ tenant, job string }{{alpha, "j1"}, {alpha, "j2"}, {beta, "j1"}} {
		dl := &schemas.DeadLetter{
			Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: ns.SamplesStream(), Seq: uint64(i + 1),
			Subject: ns.SampleSubject(ref.tenant, ref.job), Consumer: bus.ConsumerVoters, Reason: "unreadable request",
			Deliveries: 1, Data: []byte(`{"broken":`), At: time.Now().UTC(),
		}
		if err := bus.PublishDeadLetter(ctx, e.fleet.Topo.JS, ns, dl); err != nil {
			t.Fatal(err)
		}
	}
	list := func(path, key string) []schemas.StoredDeadLetter {
		t.Helper()
		var l schemas.DeadLetterList
		e.json(http.MethodGet, path, key, nil).decode(t, http.StatusOK, &l)
		return l.DeadLetters
	}
	if got := list("/v1/dlq", e.key[alpha]); len(got) != 2 || got[0].Subject != ns.SampleSubject(alpha, "j1") {
		t.Errorf("alpha's dead letters: %+v, want its two", got)
	}
	if got := list("/v1/dlq?job=j2", e.key[alpha]); len(got) != 1 || got[0].Subject != ns.SampleSubject(alpha, "j2") {
		t.Errorf("alpha's dead letters of j2: %+v", got)
	}
	if got := list("/v1/dlq", e.key[beta]); len(got) != 1 || got[0].Subject != ns.SampleSubject(beta, "j1") {
		t.Errorf("beta's dead letters: %+v, want its one", got)
	}
	if got := list("/v1/dlq?limit=1", e.key[alpha]); len(got) != 1 {
		t.Errorf("limit 1: %d dead letters", len(got))
	}
	if got := list("/v1/dlq?tenant=*", e.admin); len(got) != 3 {
		t.Errorf("every tenant's dead letters: %d, want 3", len(got))
	}
	if got := list("/v1/dlq?tenant="+beta, e.admin); len(got) != 1 {
		t.Errorf("beta's dead letters for the admin: %d, want 1", len(got))
	}
	e.json(http.MethodGet, "/v1/dlq?tenant="+beta, e.key[alpha], nil).problem(t, http.StatusForbidden, api.TypeForbidden)
	e.json(http.MethodGet, "/v1/dlq?tenant=*", e.key[alpha], nil).problem(t, http.StatusForbidden, api.TypeForbidden)
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "job=a.b", "job=*"} {
		e.json(http.MethodGet, "/v1/dlq?"+q, e.key[alpha], nil).problem(t, http.StatusBadRequest, api.TypeBadRequest)
	}
}
