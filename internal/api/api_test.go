package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestAuth: every keyed route refuses a request without a key, with a
// malformed one, an unknown one and a revoked one (401 problem, with
// WWW-Authenticate); /healthz and /openapi.json need none.
func TestAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	ctx := context.Background()
	revoked, _, err := e.keys.Create(ctx, apiKeyOpts(alpha))
	if err != nil {
		t.Fatal(err)
	}
	if e.json(http.MethodGet, "/v1/jobs", revoked, nil).status != http.StatusOK {
		t.Fatal("a fresh key is refused")
	}
	if _, err := e.keys.Revoke(ctx, revoked); err != nil {
		t.Fatal(err)
	}
	// The revoke reaches the server's cache through the bucket's watch.
	testkit.Eventually(t, 5*time.Second, func() bool {
		return e.json(http.MethodGet, "/v1/jobs", revoked, nil).status == http.StatusUnauthorized
	}, "a revoked key is still accepted")
	unknown := "mk_0123456789ab_" + strings.Repeat("A", 43)
	for _, rt := range []struct{ method, path string }{
		{http.MethodGet, "/v1/jobs"}, {http.MethodPost, "/v1/jobs"}, {http.MethodGet, "/v1/jobs/j1"},
		{http.MethodGet, "/v1/jobs/j1/result"}, {http.MethodGet, "/v1/jobs/j1/events"}, {http.MethodPost, "/v1/jobs/j1/cancel"},
		{http.MethodPost, "/v1/batches"}, {http.MethodGet, "/v1/usage"}, {http.MethodGet, "/v1/tasks"},
		{http.MethodGet, "/v1/quotas/alpha"},
	} {
		for name, h := range map[string]string{
			"none": "", "not bearer": "Basic " + e.key[alpha], "empty": "Bearer ", "malformed": "Bearer nope",
			"unknown": "Bearer " + unknown, "revoked": "Bearer " + revoked,
		} {
			req, _ := http.NewRequest(rt.method, e.http.URL+rt.path, strings.NewReader(`{}`))
			if h != "" {
				req.Header.Set("Authorization", h)
			}
			resp, err := e.http.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/problem+json" ||
				resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with key %s: %d %s, want a 401 problem", rt.method, rt.path, name, resp.StatusCode, resp.Header.Get("Content-Type"))
			}
		}
	}
	if r := e.do(http.MethodGet, "/healthz", "", "", nil); r.status != http.StatusOK {
		t.Errorf("healthz: %d", r.status)
	}
	if r := e.do(http.MethodGet, "/openapi.json", "", "", nil); r.status != http.StatusOK || !json.Valid(r.body) {
		t.Errorf("openapi.json: %d", r.status)
	}
}

// TestIsolation: a tenant sees and touches only its own jobs: another
// tenant's id is 404 on every job route (as an unknown one), listings are
// scoped, and a job always runs as the key's tenant. An admin key sees
// every tenant's.
func TestIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	a := e.submit(alpha, hanoi(3))
	if a.Tenant != alpha || a.ID == "" || a.Duplicate {
		t.Fatalf("created %+v", a)
	}
	b := e.submit(beta, hanoi(4))
	// The same job id in both tenants: two jobs.
	req := hanoi(3)
	req.JobID = "shared"
	e.submit(alpha, req)
	req.Params = json.RawMessage(`{"disks":5}`)
	e.submit(beta, req)

	for _, path := range []string{"/v1/jobs/" + b.ID, "/v1/jobs/" + b.ID + "/result", "/v1/jobs/" + b.ID + "/events",
		"/v1/jobs/" + b.ID + "/budget", "/v1/jobs/nope", "/v1/jobs/bad%20id"} {
		e.json(http.MethodGet, path, e.key[alpha], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	}
	for _, action := range []string{"pause", "resume", "cancel"} {
		e.json(http.MethodPost, "/v1/jobs/"+b.ID+"/"+action, e.key[alpha], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	}
	e.json(http.MethodPost, "/v1/jobs/"+b.ID+"/decide", e.key[alice], `{"step":0,"answer":"x"}`).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodPut, "/v1/jobs/"+b.ID+"/budget", e.key[alpha], `{"budget_usd":1}`).problem(t, http.StatusNotFound, api.TypeNotFound)
	// ?tenant= is an admin key's: another key naming another tenant finds
	// no job (404, never 403), and its listing is refused.
	e.json(http.MethodGet, "/v1/jobs/"+b.ID+"?tenant=beta", e.key[alpha], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, "/v1/jobs?tenant=beta", e.key[alpha], nil).problem(t, http.StatusForbidden, api.TypeForbidden)

	var shared schemas.JobView
	e.json(http.MethodGet, "/v1/jobs/shared", e.key[beta], nil).decode(t, http.StatusOK, &shared)
	if shared.Tenant != beta || shared.Task != "hanoi" || shared.State != schemas.StateQueued || shared.TotalSteps != 0 && shared.TotalSteps != 31 {
		t.Errorf("beta's shared job: %+v", shared)
	}
	listed := func(key, query string) []string {
		var l schemas.JobList
		e.json(http.MethodGet, "/v1/jobs"+query, key, nil).decode(t, http.StatusOK, &l)
		var out []string
		for _, j := range l.Jobs {
			out = append(out, j.Tenant+"/"+j.ID)
		}
		return out
	}
	if got, want := fmt.Sprint(listed(e.key[alpha], "")), fmt.Sprint([]string{"alpha/" + a.ID, "alpha/shared"}); got != want {
		t.Errorf("alpha lists %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(listed(e.key[beta], "")), fmt.Sprint([]string{"beta/" + b.ID, "beta/shared"}); got != want {
		t.Errorf("beta lists %s, want %s", got, want)
	}
	if got := listed(e.admin, "?tenant=*"); len(got) != 4 {
		t.Errorf("admin lists %v, want all 4", got)
	}
	if got := listed(e.admin, "?tenant=beta"); len(got) != 2 {
		t.Errorf("admin lists beta's %v, want 2", got)
	}
	var v schemas.JobView
	e.json(http.MethodGet, "/v1/jobs/"+b.ID+"?tenant=beta", e.admin, nil).decode(t, http.StatusOK, &v)
	if v.ID != b.ID || v.Tenant != beta {
		t.Errorf("admin reads %+v", v)
	}
	// A body naming another tenant is refused, and nothing is enqueued.
	before, seq := e.enqueued()
	req = hanoi(3)
	req.Tenant = beta
	p := e.json(http.MethodPost, "/v1/jobs", e.key[alpha], req).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
	if len(p.Errors) != 1 || p.Errors[0].Path != "/tenant" {
		t.Errorf("errors %+v, want /tenant", p.Errors)
	}
	if after, seq2 := e.enqueued(); after != before || seq2 != seq {
		t.Errorf("a refused job was enqueued: %d registered (was %d), stream seq %d (was %d)", after, before, seq2, seq)
	}
}

// TestListPages: a listing pages by cursor, in submission order, and
// filters by state.
func TestListPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	var ids []string
	for i := range 5 {
		req := hanoi(3)
		req.JobID = fmt.Sprintf("p%d", i)
		ids = append(ids, e.submit(alpha, req).ID)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("the listing does not end")
		}
		var l schemas.JobList
		e.json(http.MethodGet, "/v1/jobs?limit=2&cursor="+cursor, e.key[alpha], nil).decode(t, http.StatusOK, &l)
		for _, j := range l.Jobs {
			got = append(got, j.ID)
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("pages list %v, want %v", got, ids)
	}
	var l schemas.JobList
	e.json(http.MethodGet, "/v1/jobs?state=solved", e.key[alpha], nil).decode(t, http.StatusOK, &l)
	if len(l.Jobs) != 0 {
		t.Errorf("solved jobs %v, want none", l.Jobs)
	}
	for _, q := range []string{"?limit=0", "?limit=x", "?limit=100000", "?state=bogus", "?cursor=%%%", "?cursor=Zm9v"} {
		e.json(http.MethodGet, "/v1/jobs"+q, e.key[alpha], nil).problem(t, http.StatusBadRequest, api.TypeBadRequest)
	}
}

// TestRefusals: each bad request gets its problem, and none enqueues a
// job.
func TestRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{MaxBodyBytes: 4096, MaxJobBytes: 4096}})
	e.submit(alpha, hanoi(3)) // the fleet's streams hold one job
	before, seq := e.enqueued()
	big := `{"task":"hanoi","params":{"disks":3,"pad":"` + strings.Repeat("x", 5000) + `"},"k":2}`
	cases := []struct {
		name, method, path, ctype, body string
		status                          int
		typ                             string
		paths                           []string // the 422's failing paths
	}{
		{"not JSON", "POST", "/v1/jobs", "application/json", `{"task":`, 400, api.TypeBadRequest, nil},
		{"empty", "POST", "/v1/jobs", "application/json", ``, 400, api.TypeBadRequest, nil},
		{"two values", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"k":2} {}`, 400, api.TypeBadRequest, nil},
		{"an array", "POST", "/v1/jobs", "application/json", `[1]`, 400, api.TypeBadRequest, nil},
		{"too large", "POST", "/v1/jobs", "application/json", big, 413, api.TypeTooLarge, nil},
		{"form", "POST", "/v1/jobs", "application/x-www-form-urlencoded", `task=hanoi`, 415, api.TypeUnsupportedMedia, nil},
		{"bad media type", "POST", "/v1/jobs", "text/", `{}`, 415, api.TypeUnsupportedMedia, nil},
		{"unknown field", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"k":2,"bogus":1}`, 422, api.TypeInvalid, []string{"/bogus"}},
		{"wrong type", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"k":"two"}`, 422, api.TypeInvalid, []string{"/k"}},
		{"nested wrong type", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"k":2,"pricing":{"input_usd_per_mtok":"x"}}`, 422, api.TypeInvalid, []string{"/pricing/input_usd_per_mtok"}},
		{"params out of range", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":99},"k":2}`, 422, api.TypeInvalid, []string{"/params/disks"}},
		{"params unknown", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"rings":3},"k":2}`, 422, api.TypeInvalid, []string{"/params/rings"}},
		{"params not an object", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":[3],"k":2}`, 422, api.TypeInvalid, []string{"/params"}},
		{"no params", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","k":2}`, 422, api.TypeInvalid, []string{"/params"}},
		{"unknown task", "POST", "/v1/jobs", "application/json", `{"task":"nosuch","params":{},"k":2}`, 422, api.TypeInvalid, []string{"/task"}},
		{"no task", "POST", "/v1/jobs", "application/json", `{"params":{"disks":3},"k":2}`, 422, api.TypeInvalid, []string{"/task"}},
		{"k left out, p too low to plan it", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"p_estimate":0.4}`, 422, api.TypeInvalid, []string{"/k"}},
		{"k zero, target out of range", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"k":0,"reliability_target":1}`, 422, api.TypeInvalid, []string{"/k"}},
		{"k too large", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"k":5000}`, 422, api.TypeInvalid, []string{"/k"}},
		{"priority", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"k":2,"priority":10}`, 422, api.TypeInvalid, []string{"/priority"}},
		{"budget without a fleet price", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"k":2,"budget_usd":1,"pricing":{"input_usd_per_mtok":1,"output_usd_per_mtok":1}}`, 422, api.TypeUnpriced, nil},
		{"negative price", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"k":2,"pricing":{"input_usd_per_mtok":-1,"output_usd_per_mtok":1}}`, 422, api.TypeInvalid, []string{"/pricing/input_usd_per_mtok"}},
		{"bad job id", "POST", "/v1/jobs", "application/json", `{"job_id":"a b","task":"hanoi","params":{"disks":3},"k":2}`, 422, api.TypeInvalid, []string{"/job_id"}},
		{"samples below k", "POST", "/v1/jobs", "application/json", `{"task":"hanoi","params":{"disks":3},"k":5,"max_samples_per_step":3}`, 422, api.TypeInvalid, []string{"/max_samples_per_step"}},
		{"method", "DELETE", "/v1/jobs", "", ``, 405, api.TypeMethodNotAllowed, nil},
		{"route", "GET", "/v2/jobs", "", ``, 404, api.TypeNotFound, nil},
		{"decide by a tenant key", "POST", "/v1/jobs/x/decide", "application/json", `{"step":1,"answer":"a"}`, 403, api.TypeForbidden, nil},
		{"admin route", "PUT", "/v1/quotas/alpha", "application/json", `{"max_running_jobs":1}`, 403, api.TypeForbidden, nil},
		{"admin task register", "POST", "/v1/tasks", "application/yaml", `name: x`, 403, api.TypeForbidden, nil},
		{"admin price route", "PUT", "/v1/prices/default", "application/json", `{"input_usd_per_mtok":0,"output_usd_per_mtok":0}`, 403, api.TypeForbidden, nil},
		{"admin price removal", "DELETE", "/v1/prices/sim-1", "", ``, 403, api.TypeForbidden, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(c.method, c.path, e.key[alpha], c.ctype, strings.NewReader(c.body))
			p := r.problem(t, c.status, c.typ)
			if p.Instance != strings.SplitN(c.path, "?", 2)[0] {
				t.Errorf("instance %q, want the path", p.Instance)
			}
			if c.status == http.StatusMethodNotAllowed && r.header.Get("Allow") != "POST, GET, HEAD" {
				t.Errorf("Allow %q", r.header.Get("Allow"))
			}
			var paths []string
			for _, fe := range p.Errors {
				paths = append(paths, fe.Path)
				if fe.Message == "" {
					t.Errorf("error at %s has no message", fe.Path)
				}
			}
			if fmt.Sprint(paths) != fmt.Sprint(c.paths) {
				t.Errorf("failing paths %v, want %v (%s)", paths, c.paths, p.Detail)
			}
		})
	}
	if after, seq2 := e.enqueued(); after != before || seq2 != seq {
		t.Errorf("refused jobs were enqueued: %d registered (was %d), stream seq %d (was %d)", after, before, seq2, seq)
	}
}

// TestSubmitDuplicate: the same job under the same id is a duplicate (200,
// queued once); another job under a taken id is a 409.
func TestSubmitDuplicate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	req := hanoi(3)
	req.JobID = "once"
	first := e.json(http.MethodPost, "/v1/jobs", e.key[alpha], req)
	if first.status != http.StatusCreated || first.header.Get("Location") != "/v1/jobs/once" {
		t.Fatalf("first submit: %d %s (Location %q)", first.status, first.body, first.header.Get("Location"))
	}
	_, seq := e.enqueued()
	var dup schemas.JobCreated
	e.json(http.MethodPost, "/v1/jobs", e.key[alpha], req).decode(t, http.StatusOK, &dup)
	if !dup.Duplicate || dup.ID != "once" {
		t.Errorf("resubmit: %+v", dup)
	}
	req.K = 3
	e.json(http.MethodPost, "/v1/jobs", e.key[alpha], req).problem(t, http.StatusConflict, api.TypeConflict)
	if _, seq2 := e.enqueued(); seq2 != seq {
		t.Errorf("job stream went from %d to %d on a duplicate and a conflict", seq, seq2)
	}
}

// TestRateLimit: a key over its rate gets 429 with Retry-After; another
// key is not held back by it.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{RatePerSec: 0.001, Burst: 3}})
	for i := range 3 {
		if r := e.json(http.MethodGet, "/v1/usage", e.key[alpha], nil); r.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	r := e.json(http.MethodGet, "/v1/usage", e.key[alpha], nil)
	r.problem(t, http.StatusTooManyRequests, api.TypeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	if r := e.json(http.MethodGet, "/v1/usage", e.key[beta], nil); r.status != http.StatusOK {
		t.Errorf("beta held back by alpha's limit: %d", r.status)
	}
}

func apiKeyOpts(tenant string) apikey.CreateOptions { return apikey.CreateOptions{Tenant: tenant} }

// TestSubmitPlansK: a job that leaves k out has it planned as the CLI
// does (plan.KMin at p_estimate, else schemas.DefaultP, for its planned
// steps and target); the answer and the job's view say which k and why.
// A missing field is said to be missing.
func TestSubmitPlansK(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	for _, c := range []struct {
		name, body string
		p, target  float64
		steps      int64
		basis      string
	}{
		{"defaults", `{"job_id":"plan-a","task":"hanoi","params":{"disks":10}}`, schemas.DefaultP, schemas.DefaultTarget, 1023, "the default"},
		{"p and target given", `{"job_id":"plan-b","task":"hanoi","params":{"disks":10},"p_estimate":0.99,"reliability_target":0.999}`, 0.99, 0.999, 1023, "p_estimate 0.99"},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, err := plan.KMin(c.p, c.steps, c.target)
			if err != nil {
				t.Fatal(err)
			}
			var created schemas.JobCreated
			e.do(http.MethodPost, "/v1/jobs", e.key[alpha], "application/json", strings.NewReader(c.body)).decode(t, http.StatusCreated, &created)
			if created.K != want || !strings.Contains(created.KBasis, fmt.Sprintf("k %d planned", want)) || !strings.Contains(created.KBasis, c.basis) ||
				!strings.Contains(created.KBasis, fmt.Sprint(c.steps)) {
				t.Errorf("created k %d, basis %q; want k %d planned for %d steps, saying %q", created.K, created.KBasis, want, c.steps, c.basis)
			}
			var view schemas.JobView
			e.json(http.MethodGet, "/v1/jobs/"+created.ID, e.key[alpha], nil).decode(t, http.StatusOK, &view)
			if view.K != want || view.KBasis != created.KBasis {
				t.Errorf("view k %d basis %q; want %d %q", view.K, view.KBasis, want, created.KBasis)
			}
		})
	}
	// A k the request gives is kept, with no basis.
	var given schemas.JobCreated
	e.json(http.MethodPost, "/v1/jobs", e.key[alpha], hanoi(3)).decode(t, http.StatusCreated, &given)
	if given.K != 2 || given.KBasis != "" {
		t.Errorf("given k: %+v", given)
	}
	for _, c := range []struct{ body, path, says string }{
		{`{"task":"hanoi","k":2}`, "/params", "params are missing"},
		{`{"params":{"disks":3},"k":2}`, "/task", "task is missing"},
	} {
		p := e.do(http.MethodPost, "/v1/jobs", e.key[alpha], "application/json", strings.NewReader(c.body)).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
		if len(p.Errors) != 1 || p.Errors[0].Path != c.path || !strings.Contains(p.Errors[0].Message, c.says) {
			t.Errorf("%s: %+v, want %s saying %q", c.body, p.Errors, c.path, c.says)
		}
	}
}
