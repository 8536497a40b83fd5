package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/api"
)

// documented fails the test unless the OpenAPI document lists status
// among the responses of method path (a route's pattern).
func documented(t *testing.T, d openapiDoc, method, path string, status int) {
	t.Helper()
	var op operation
	if err := json.Unmarshal(d.Paths[path][strings.ToLower(method)], &op); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if _, ok := op.Responses[itoa(status)]; !ok {
		t.Errorf("%s %s answered %d, which its OpenAPI responses do not list", method, path, status)
	}
}

// TestOpenAPIStatuses: the statuses the server answers beside the usual
// ones are documented: 400 for a query string that does not parse (every
// route), 400 for a malformed ?tenant=, the 200 of a duplicate job and of
// a task spec registered again. A non-admin key naming another tenant's
// job by ?tenant= gets 404, its own tenant the job.
func TestOpenAPIStatuses(t *testing.T) {
	t.Parallel()
	d := readDoc(t)
	srv := newBareServer(t)
	for path, ops := range d.Paths {
		for method := range ops {
			concrete := strings.NewReplacer("{id}", "j1", "{name}", "hanoi", "{tenant}", "alpha").Replace(path)
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, httptest.NewRequest(strings.ToUpper(method), concrete+"?x=%zz", nil))
			if rec.Code != http.StatusBadRequest {
				t.Errorf("%s %s?x=%%zz: %d, want 400", method, concrete, rec.Code)
			}
			documented(t, d, method, path, rec.Code)
		}
	}

	e := newEnv(t, options{})
	req := hanoi(3)
	req.JobID = "dup-1"
	e.submit(alpha, req)
	r := e.json(http.MethodPost, "/v1/jobs", e.key[alpha], req)
	if r.status != http.StatusOK {
		t.Fatalf("duplicate submit: %d %s", r.status, r.body)
	}
	documented(t, d, http.MethodPost, "/v1/jobs", r.status)

	src, err := os.ReadFile("../../examples/tasks/multiply.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{http.StatusCreated, http.StatusOK} {
		r := e.do(http.MethodPost, "/v1/tasks", e.admin, "application/yaml", strings.NewReader(string(src)))
		if r.status != want {
			t.Fatalf("register task: %d, want %d: %s", r.status, want, r.body)
		}
		documented(t, d, http.MethodPost, "/v1/tasks", r.status)
	}

	b := e.submit(beta, hanoi(3))
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/jobs/{id}"}, {http.MethodGet, "/v1/jobs/{id}/result"}, {http.MethodGet, "/v1/jobs/{id}/events"},
		{http.MethodPost, "/v1/jobs/{id}/pause"}, {http.MethodPost, "/v1/jobs/{id}/resume"}, {http.MethodPost, "/v1/jobs/{id}/cancel"},
		{http.MethodGet, "/v1/jobs/{id}/budget"},
	} {
		path := strings.Replace(c.path, "{id}", b.ID, 1)
		e.json(c.method, path+"?tenant=Not%20A%20Tenant", e.admin, nil).problem(t, http.StatusBadRequest, api.TypeBadRequest)
		documented(t, d, c.method, c.path, http.StatusBadRequest)
		e.json(c.method, path+"?tenant=beta", e.key[alpha], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
		documented(t, d, c.method, c.path, http.StatusNotFound)
	}
	e.json(http.MethodGet, "/v1/jobs/"+b.ID+"?tenant=beta", e.key[beta], nil).decode(t, http.StatusOK, new(map[string]any))
}
