package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestListReadsItsPageOnly: a listing pages by key and reads only its
// page's records: a record it cannot read, past the page, does not fail
// the page. A filtered page reads a bounded number of records and may
// come back short with a next cursor; walking the pages finds every
// match.
func TestListReadsItsPageOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{ListLimit: 1, MaxListLimit: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 6 {
		req := hanoi(3)
		req.JobID = fmt.Sprintf("p%d", i)
		e.submit(alpha, req)
	}
	// Last in key order, and not a job record: reading it fails.
	if _, err := e.fleet.Topo.Jobs.Put(ctx, "alpha.zzz", []byte("not a record")); err != nil {
		t.Fatal(err)
	}
	var l schemas.JobList
	e.json(http.MethodGet, "/v1/jobs?limit=1", e.key[alpha], nil).decode(t, http.StatusOK, &l)
	if len(l.Jobs) != 1 || l.Jobs[0].ID != "p0" || l.NextCursor == "" {
		t.Fatalf("first page %+v, want p0 and a next cursor", l)
	}
	e.json(http.MethodGet, "/v1/jobs?cursor="+l.NextCursor, e.key[alpha], nil).decode(t, http.StatusOK, &l)
	if len(l.Jobs) != 1 || l.Jobs[0].ID != "p1" {
		t.Fatalf("second page %+v, want p1", l)
	}

	// ?state= reads at most 4 records a page (4 × MaxListLimit): p0-p3
	// are queued, so the first page of running jobs is empty, with a
	// cursor after p3.
	e.json(http.MethodGet, "/v1/jobs?state=running", e.key[alpha], nil).decode(t, http.StatusOK, &l)
	if len(l.Jobs) != 0 || l.NextCursor == "" {
		t.Fatalf("first page of running jobs %+v, want none and a next cursor", l)
	}
	e.json(http.MethodGet, "/v1/jobs?state=queued&cursor="+l.NextCursor, e.key[alpha], nil).decode(t, http.StatusOK, &l)
	if len(l.Jobs) != 1 || l.Jobs[0].ID != "p4" {
		t.Fatalf("queued jobs after the filtered page's cursor %+v, want p4", l)
	}
}
