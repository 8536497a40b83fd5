package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// apiServer is a running `maker serve`.
type apiServer struct {
	*proc
	url string
}

var serveRE = regexp.MustCompile(`maker serve listening on (http://\S+)`)

// startServe starts `maker serve` on a free port and waits until it
// answers /healthz.
func startServe(t *testing.T, svc *services, extra ...string) *apiServer {
	t.Helper()
	args := append([]string{"serve", "--nats", svc.natsURL, "--redis", svc.redisURL, "--addr", "127.0.0.1:0"}, extra...)
	p := startProc(t, "serve", args...)
	s := &apiServer{proc: p}
	waitFor(t, 20*time.Second, "maker serve to print its address", func() bool {
		m := serveRE.FindStringSubmatch(p.stderr())
		if m != nil {
			s.url = m[1]
		}
		return m != nil
	}, p)
	waitFor(t, 20*time.Second, "maker serve to answer /healthz", func() bool {
		resp, err := httpc.Get(s.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, p)
	return s
}

// createKey makes an API key for tenant with `maker keys create --json`.
func createKey(t *testing.T, svc *services, tenant string, extra ...string) (key, id string) {
	t.Helper()
	res := runMaker(t, cmdTimeout, append([]string{"keys", "create", "--tenant", tenant, "--nats", svc.natsURL, "--json"}, extra...)...)
	if res.code != 0 {
		t.Fatalf("keys create --tenant %s: exit %d: %s", tenant, res.code, res.stderr)
	}
	var out struct {
		Key   string `json:"key"`
		KeyID string `json:"key_id"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || out.Key == "" {
		t.Fatalf("keys create printed %q (%v), want {\"key\": ...}", res.stdout, err)
	}
	return out.Key, out.KeyID
}

// call is one API request: its status, body and decoded problem (if the
// answer was one).
type call struct {
	status int
	body   []byte
	ctype  string
}

func (c call) problem(t *testing.T) schemas.Problem {
	t.Helper()
	var p schemas.Problem
	if !strings.HasPrefix(c.ctype, "application/problem+json") {
		t.Fatalf("status %d with Content-Type %q, want application/problem+json: %s", c.status, c.ctype, c.body)
	}
	if err := json.Unmarshal(c.body, &p); err != nil || p.Status != c.status || p.Title == "" {
		t.Fatalf("problem %s (%v): want status %d and a title", c.body, err, c.status)
	}
	return p
}

func (c call) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(c.body, v); err != nil {
		t.Fatalf("decode %s: %v", c.body, err)
	}
}

func (s *apiServer) do(t *testing.T, key, method, path, ctype string, body []byte) call {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return call{status: resp.StatusCode, body: b, ctype: resp.Header.Get("Content-Type")}
}

func (s *apiServer) get(t *testing.T, key, path string) call {
	t.Helper()
	return s.do(t, key, http.MethodGet, path, "", nil)
}

func (s *apiServer) postJSON(t *testing.T, key, path string, v any) call {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return s.do(t, key, http.MethodPost, path, "application/json", b)
}

// submit posts a job and returns its id, failing unless it is accepted.
func (s *apiServer) submit(t *testing.T, key string, job map[string]any) schemas.JobCreated {
	t.Helper()
	c := s.postJSON(t, key, "/v1/jobs", job)
	if c.status != http.StatusCreated {
		t.Fatalf("POST /v1/jobs %v: status %d: %s", job, c.status, c.body)
	}
	var created schemas.JobCreated
	c.decode(t, &created)
	if created.ID == "" {
		t.Fatalf("POST /v1/jobs answered no id: %s", c.body)
	}
	return created
}

// waitJob waits until the job's state is one of states and returns its view.
func (s *apiServer) waitJob(t *testing.T, key, id string, timeout time.Duration, states ...string) schemas.JobView {
	t.Helper()
	var v schemas.JobView
	waitFor(t, timeout, fmt.Sprintf("job %s to reach %v", id, states), func() bool {
		c := s.get(t, key, "/v1/jobs/"+id)
		if c.status != http.StatusOK {
			return false
		}
		v = schemas.JobView{}
		c.decode(t, &v)
		for _, st := range states {
			if v.State == st && (st != schemas.StateSolved || v.Finished) {
				return true
			}
		}
		return false
	}, s.proc)
	return v
}

// jobsQueued is how many job messages the fleet's intake has ever taken.
func (svc *services) jobsQueued(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	st, err := svc.js.Stream(ctx, "MAKER_JOBS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// TestAPITwoTenants drives `maker serve` with two tenants' keys over real
// processes (NATS, Redis, the simulated model, a coordinator, a voter and
// the API server): jobs and their results, isolation (another tenant's ids
// are 404, lists are the tenant's own), unknown and revoked keys (401), bad
// input (413, 422 with the failing path, nothing queued), a batch with a
// bad line (counts, output in input order, the error file), the OpenAPI
// document, and a live quota.
func TestAPITwoTenants(t *testing.T) {
	svc := startServices(t, true)
	model := startSim(t, "simllm", "--accuracy", "0.97", "--seed", "11", "--latency", "1ms")
	coord := svc.startCoordinator(t, "coord-1")
	v := svc.startVoter(t, "voter-1", model.url, "--concurrency", "16")
	svc.waitFleet(t, coord, v)
	api := startServe(t, svc, "--max-job-bytes", "1048576")
	// The tests poll: keys with room for it.
	alpha, _ := createKey(t, svc, "alpha", "--rate", "1000", "--burst", "1000")
	beta, betaID := createKey(t, svc, "beta", "--rate", "1000", "--burst", "1000")

	// The OpenAPI document needs no key and names the routes.
	c := api.get(t, "", "/openapi.json")
	if c.status != http.StatusOK || !bytes.Contains(c.body, []byte(`"openapi": "3.1`)) && !bytes.Contains(c.body, []byte(`"openapi":"3.1`)) {
		t.Fatalf("GET /openapi.json: %d %.200s", c.status, c.body)
	}
	for _, path := range []string{"/v1/jobs", "/v1/jobs/{id}", "/v1/jobs/{id}/result", "/v1/batches", "/v1/batches/{id}/output"} {
		if !bytes.Contains(c.body, []byte(`"`+path+`"`)) {
			t.Errorf("the OpenAPI document has no path %s", path)
		}
	}

	// Alpha runs a job end to end; its result is the --json report.
	created := api.submit(t, alpha, map[string]any{"task": "hanoi", "params": map[string]any{"disks": 3}, "k": 2, "seed": 7})
	if created.Tenant != "alpha" {
		t.Errorf("job created for tenant %q, want alpha", created.Tenant)
	}
	view := api.waitJob(t, alpha, created.ID, 60*time.Second, schemas.StateSolved)
	if view.Steps != 7 || view.Progress != 1 {
		t.Errorf("solved job: %d steps, progress %v; want 7 and 1", view.Steps, view.Progress)
	}
	c = api.get(t, alpha, "/v1/jobs/"+created.ID+"/result")
	if c.status != http.StatusOK {
		t.Fatalf("result: %d %s", c.status, c.body)
	}
	var rep schemas.JobReport
	c.decode(t, &rep)
	if !rep.Solved || rep.Steps != 7 || rep.Tenant != "alpha" || rep.JobID != created.ID || rep.SamplesPerStep <= 0 {
		t.Errorf("report: %+v", rep)
	}
	var fields map[string]any
	c.decode(t, &fields)
	for _, f := range []string{"state", "steps", "errors", "samples", "votes", "samples_per_step", "wall_seconds"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("the result has no %q field (the --json report's)", f)
		}
	}

	// Beta sees none of it: 404 on every route, never 403, and an empty list.
	for _, path := range []string{"/v1/jobs/" + created.ID, "/v1/jobs/" + created.ID + "/result", "/v1/jobs/" + created.ID + "/events"} {
		if c := api.get(t, beta, path); c.status != http.StatusNotFound {
			t.Errorf("beta GET %s: %d, want 404", path, c.status)
		} else {
			c.problem(t)
		}
	}
	if c := api.postJSON(t, beta, "/v1/jobs/"+created.ID+"/cancel", nil); c.status != http.StatusNotFound {
		t.Errorf("beta cancels alpha's job: %d, want 404", c.status)
	}
	var list schemas.JobList
	api.get(t, beta, "/v1/jobs").decode(t, &list)
	if len(list.Jobs) != 0 {
		t.Errorf("beta lists %d jobs, want none: %+v", len(list.Jobs), list.Jobs)
	}
	list = schemas.JobList{}
	api.get(t, alpha, "/v1/jobs").decode(t, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].ID != created.ID {
		t.Errorf("alpha lists %+v, want its one job", list.Jobs)
	}
	// A body naming another tenant is refused, not run as that tenant.
	if c := api.postJSON(t, beta, "/v1/jobs", map[string]any{"tenant": "alpha", "task": "hanoi", "params": map[string]any{"disks": 3}, "k": 2}); c.status != http.StatusUnprocessableEntity {
		t.Errorf("beta submits as alpha: %d, want 422", c.status)
	}

	// Keys: none, unknown and malformed are 401 problems.
	for _, key := range []string{"", "mk_000000000000_nope", "not a key", alpha + "x"} {
		if c := api.get(t, key, "/v1/jobs"); c.status != http.StatusUnauthorized {
			t.Errorf("key %q: %d, want 401", key, c.status)
		} else {
			c.problem(t)
		}
	}

	// Bad input: nothing is queued for any of it.
	before := svc.jobsQueued(t)
	// A job's body is bounded by --max-job-bytes (1 MiB here; 32 MiB and
	// 64 KiB by default, for params as large as the fleet keeps).
	if c := api.do(t, alpha, http.MethodPost, "/v1/jobs", "application/json", bytes.Repeat([]byte(" "), 2<<20)); c.status != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2 MiB body: %d, want 413", c.status)
	} else {
		c.problem(t)
	}
	c = api.postJSON(t, alpha, "/v1/jobs", map[string]any{"task": "hanoi", "params": map[string]any{"disks": 99}, "k": 2})
	if c.status != http.StatusUnprocessableEntity {
		t.Errorf("disks 99: %d, want 422: %s", c.status, c.body)
	} else if p := c.problem(t); len(p.Errors) == 0 || !strings.Contains(p.Errors[0].Path, "disks") {
		t.Errorf("disks 99: problem %+v, want an error whose path names disks", p)
	}
	for _, body := range []string{`{"task": "hanoi", "params": {"disks": 3}, "k": -1}`, `{"task": "hanoi", "params": {"disks": 3}, "p_estimate": 0.5}`, `{"task": "nope", "params": {}, "k": 2}`, `{"task":`, `[]`} {
		if c := api.do(t, alpha, http.MethodPost, "/v1/jobs", "application/json", []byte(body)); c.status != http.StatusUnprocessableEntity && c.status != http.StatusBadRequest {
			t.Errorf("body %s: %d, want 400 or 422", body, c.status)
		} else {
			c.problem(t)
		}
	}
	if after := svc.jobsQueued(t); after != before {
		t.Errorf("refused requests queued %d jobs", after-before)
	}

	// A batch: one line per job, a bad line reported by number, the rest run;
	// output in input order.
	lines := strings.Join([]string{
		`{"custom_id": "first", "task": "hanoi", "params": {"disks": 2}, "k": 2}`,
		`{"custom_id": "broken", "task": "hanoi", "params": {"disks": 2}, "k": `,
		`{"custom_id": "third", "task": "hanoi", "params": {"disks": 3}, "k": 2, "seed": 3}`,
		`{"custom_id": "fourth", "task": "hanoi", "params": {"disks": 0}, "k": 2}`,
	}, "\n") + "\n"
	c = api.do(t, alpha, http.MethodPost, "/v1/batches", "application/jsonl", []byte(lines))
	if c.status != http.StatusCreated {
		t.Fatalf("POST /v1/batches: %d %s", c.status, c.body)
	}
	var batch schemas.BatchRecord
	c.decode(t, &batch)
	if batch.ID == "" || batch.Counts.Total != 4 {
		t.Fatalf("batch created: %+v", batch)
	}
	waitFor(t, 90*time.Second, "the batch to complete", func() bool {
		c := api.get(t, alpha, "/v1/batches/"+batch.ID)
		batch = schemas.BatchRecord{}
		c.decode(t, &batch)
		return batch.State == "completed"
	}, api.proc)
	if got := batch.Counts; got.Total != 4 || got.Completed != 2 || got.Failed != 2 {
		t.Errorf("batch counts %+v, want total 4, completed 2, failed 2 (two bad lines)", got)
	}
	if c := api.get(t, beta, "/v1/batches/"+batch.ID); c.status != http.StatusNotFound {
		t.Errorf("beta reads alpha's batch: %d, want 404", c.status)
	}
	c = api.get(t, alpha, "/v1/batches/"+batch.ID+"/output")
	if c.status != http.StatusOK {
		t.Fatalf("batch output: %d %s", c.status, c.body)
	}
	var out []schemas.BatchOutputLine
	sc := bufio.NewScanner(bytes.NewReader(c.body))
	for sc.Scan() {
		var l schemas.BatchOutputLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	wantIDs := []string{"first", "broken", "third", "fourth"}
	if len(out) != len(wantIDs) {
		t.Fatalf("output has %d lines, want %d: %s", len(out), len(wantIDs), c.body)
	}
	for i, l := range out {
		ok := l.Line == int64(i+1) && (l.CustomID == wantIDs[i] || (i == 1 && l.CustomID == ""))
		switch i {
		case 0, 2:
			ok = ok && l.Response != nil && l.Response.Solved && l.Error == nil
		default:
			ok = ok && l.Response == nil && l.Error != nil
		}
		if !ok {
			t.Errorf("output line %d: %+v", i+1, l)
		}
	}
	if c := api.get(t, alpha, "/v1/batches/"+batch.ID+"/errors"); c.status != http.StatusOK || !bytes.Contains(c.body, []byte(`"line":2`)) {
		t.Errorf("batch errors: %d %s; want line 2 named", c.status, c.body)
	}
	// Duplicate custom_ids refuse the whole batch: nothing is queued.
	before = svc.jobsQueued(t)
	dup := `{"custom_id": "a", "task": "hanoi", "params": {"disks": 2}, "k": 2}` + "\n" + `{"custom_id": "a", "task": "hanoi", "params": {"disks": 2}, "k": 2}` + "\n"
	if c := api.do(t, alpha, http.MethodPost, "/v1/batches", "application/jsonl", []byte(dup)); c.status != http.StatusUnprocessableEntity {
		t.Errorf("duplicate custom_ids: %d, want 422: %s", c.status, c.body)
	}
	time.Sleep(500 * time.Millisecond) // a runner would have fed a line by now
	if after := svc.jobsQueued(t); after != before {
		t.Errorf("a refused batch queued %d jobs", after-before)
	}

	// A revoked key is refused at once by the running server.
	if res := runMaker(t, cmdTimeout, "keys", "revoke", betaID, "--nats", svc.natsURL); res.code != 0 {
		t.Fatalf("keys revoke: exit %d: %s", res.code, res.stderr)
	}
	waitFor(t, 10*time.Second, "the revoked key to be refused", func() bool {
		return api.get(t, beta, "/v1/jobs").status == http.StatusUnauthorized
	}, api.proc)
}

// TestAPIQuotasAndBudgets runs two coordinators behind `maker serve`:
// a quota set live (alpha: one job at a time) holds across both, and
// budgets hold under concurrency: beta submits many priced jobs at once
// with per-job budgets under a tenant spend per day smaller than their
// sum; every job ends solved or budget_exhausted, no job spends past its
// budget, the tenant not past its day's limit, and raising a job's budget
// and resuming it finishes it.
func TestAPIQuotasAndBudgets(t *testing.T) {
	svc := startServices(t, true)
	model := startSim(t, "simllm", "--accuracy", "0.97", "--seed", "5", "--latency", "1ms")
	c1 := svc.startCoordinator(t, "coord-1")
	c2 := svc.startCoordinator(t, "coord-2")
	v := svc.startVoter(t, "voter-1", model.url, "--concurrency", "16")
	svc.waitFleet(t, c1, v)
	svc.waitFleet(t, c2, v)
	api := startServe(t, svc)
	alpha, _ := createKey(t, svc, "alpha", "--rate", "1000", "--burst", "1000")
	beta, _ := createKey(t, svc, "beta", "--rate", "1000", "--burst", "1000")

	// The fleet's prices, set first: the API and the coordinators read
	// them through a watch, which the budget checks below wait on.
	if res := runMaker(t, cmdTimeout, "prices", "set", "--default", "--input", "2", "--output", "8", "--nats", svc.natsURL); res.code != 0 {
		t.Fatalf("prices set: exit %d: %s", res.code, res.stderr)
	}
	// A live quota: alpha runs one job at a time, fleet-wide.
	if res := runMaker(t, cmdTimeout, "quota", "set", "--tenant", "alpha", "--max-running-jobs", "1", "--nats", svc.natsURL); res.code != 0 {
		t.Fatalf("quota set: exit %d: %s", res.code, res.stderr)
	}
	var ids []string
	for i := range 3 {
		ids = append(ids, api.submit(t, alpha, map[string]any{"task": "hanoi", "params": map[string]any{"disks": 4}, "k": 2, "seed": i}).ID)
	}
	most := 0
	waitFor(t, 120*time.Second, "alpha's three jobs to finish", func() bool {
		var u schemas.Usage
		c := api.get(t, alpha, "/v1/usage")
		if c.status != http.StatusOK {
			t.Fatalf("usage: %d %s", c.status, c.body)
		}
		c.decode(t, &u)
		most = max(most, int(u.RunningJobs))
		return u.Jobs[schemas.StateSolved] == 3
	}, api.proc)
	if most > 1 {
		t.Errorf("alpha ran %d jobs at once under max_running_jobs 1", most)
	}
	// Exactly: no two of the jobs' runs overlap.
	var runs []schemas.JobReport
	for _, id := range ids {
		var rep schemas.JobReport
		api.get(t, alpha, "/v1/jobs/"+id+"/result").decode(t, &rep)
		for _, o := range runs {
			if rep.StartedAt.Before(o.FinishedAt) && o.StartedAt.Before(rep.FinishedAt) {
				t.Errorf("jobs %s and %s ran at once under max_running_jobs 1", rep.JobID, o.JobID)
			}
		}
		runs = append(runs, rep)
	}

	// Budgets under concurrency, at the fleet's prices (set above; the
	// jobs' own claim of 0 is no price).
	pricing := map[string]any{"input_usd_per_mtok": 0.0, "output_usd_per_mtok": 0.0}
	job := func(seed int, budget float64) map[string]any {
		m := map[string]any{"task": "hanoi", "params": map[string]any{"disks": 4}, "k": 2, "seed": seed,
			"pricing": pricing, "max_output_tokens": 64}
		if budget > 0 {
			m["budget_usd"] = budget
		}
		return m
	}
	// The API's price table follows the bucket through a watch: submit
	// the probe again (a duplicate by job_id, nothing more is queued)
	// until its forecast is priced.
	var probe schemas.JobCreated
	probeSpec := job(100, 0)
	probeSpec["job_id"] = "probe"
	waitFor(t, 30*time.Second, "the API's forecast at the fleet's prices", func() bool {
		c := api.postJSON(t, beta, "/v1/jobs", probeSpec)
		if c.status != http.StatusCreated && c.status != http.StatusOK {
			t.Fatalf("POST /v1/jobs (probe): %d %s", c.status, c.body)
		}
		c.decode(t, &probe)
		return probe.Forecast != nil && probe.Forecast.CostUSD > 0
	}, api.proc)
	if probe.Forecast.CostHighUSD < probe.Forecast.CostUSD {
		t.Fatalf("forecast %+v: want a cost band", probe.Forecast)
	}
	api.waitJob(t, beta, probe.ID, 60*time.Second, schemas.StateSolved)
	var probeBudget schemas.JobBudget
	api.get(t, beta, "/v1/jobs/"+probe.ID+"/budget").decode(t, &probeBudget)
	if probeBudget.SpentUSD <= 0 {
		t.Fatalf("a priced job spent %v", probeBudget.SpentUSD)
	}
	// A budget below the forecast's lowest cost is refused, nothing queued.
	before := svc.jobsQueued(t)
	if c := api.postJSON(t, beta, "/v1/jobs", job(101, probe.Forecast.CostLowUSD/10)); c.status != http.StatusUnprocessableEntity {
		t.Errorf("a budget below the forecast: %d, want 422: %s", c.status, c.body)
	}
	if after := svc.jobsQueued(t); after != before {
		t.Errorf("a refused job was queued")
	}
	// Beta's day: the probe's spend plus about three more such jobs.
	day := probeBudget.SpentUSD * 4
	if res := runMaker(t, cmdTimeout, "quota", "set", "--tenant", "beta", "--spend-per-day", fmt.Sprint(day), "--nats", svc.natsURL); res.code != 0 {
		t.Fatalf("quota set: exit %d: %s", res.code, res.stderr)
	}
	budget := max(probe.Forecast.CostLowUSD, probe.Forecast.CostUSD)
	var jobs []string
	for i := range 10 {
		jobs = append(jobs, api.submit(t, beta, job(200+i, budget)).ID)
	}
	final := map[string]string{}
	for _, id := range jobs {
		v := api.waitJob(t, beta, id, 180*time.Second, schemas.StateSolved, schemas.StateBudgetExhausted)
		final[id] = v.State
	}
	var spent float64
	exhausted := ""
	for _, id := range jobs {
		var b schemas.JobBudget
		api.get(t, beta, "/v1/jobs/"+id+"/budget").decode(t, &b)
		if b.SpentUSD > budget+1e-9 {
			t.Errorf("job %s spent %v over its budget %v", id, b.SpentUSD, budget)
		}
		spent += b.SpentUSD
		if final[id] == schemas.StateBudgetExhausted {
			exhausted = id
		}
	}
	var u schemas.Usage
	api.get(t, beta, "/v1/usage").decode(t, &u)
	if u.SpentTodayUSD > day+1e-9 {
		t.Errorf("beta spent %v today over its limit %v", u.SpentTodayUSD, day)
	}
	if exhausted == "" {
		t.Fatalf("no job ran out of budget: %v (day limit %v, budget %v each)", final, day, budget)
	}
	// Raise the day's limit and the job's budget, resume: it finishes.
	if res := runMaker(t, cmdTimeout, "quota", "set", "--tenant", "beta", "--spend-per-day", "0", "--nats", svc.natsURL); res.code != 0 {
		t.Fatalf("quota set: exit %d: %s", res.code, res.stderr)
	}
	b, _ := json.Marshal(schemas.BudgetBody{BudgetUSD: budget * 10})
	if c := api.do(t, beta, http.MethodPut, "/v1/jobs/"+exhausted+"/budget", "application/json", b); c.status != http.StatusOK {
		t.Fatalf("raise the budget: %d %s", c.status, c.body)
	}
	if c := api.postJSON(t, beta, "/v1/jobs/"+exhausted+"/resume", nil); c.status != http.StatusOK {
		t.Fatalf("resume: %d %s", c.status, c.body)
	}
	api.waitJob(t, beta, exhausted, 60*time.Second, schemas.StateSolved)
}

// TestAPIFairShare: one coordinator running one job at a time (--max-jobs
// 1) is not held by one tenant's long job: beta's small job, submitted
// through the API while alpha's 12-disk job runs, finishes first; the
// coordinator hands alpha's job back at a step boundary after --slice and
// takes it up again after.
func TestAPIFairShare(t *testing.T) {
	svc := startServices(t, true)
	model := startSim(t, "simllm", "--accuracy", "0.99", "--seed", "3", "--latency", "2ms")
	coord := svc.startCoordinator(t, "coord-1", "--max-jobs", "1", "--slice", "500ms")
	v := svc.startVoter(t, "voter-1", model.url, "--concurrency", "8")
	svc.waitFleet(t, coord, v)
	api := startServe(t, svc)
	alpha, _ := createKey(t, svc, "alpha", "--rate", "1000", "--burst", "1000")
	beta, _ := createKey(t, svc, "beta", "--rate", "1000", "--burst", "1000")

	long := api.submit(t, alpha, map[string]any{"task": "hanoi", "params": map[string]any{"disks": 12}, "k": 3, "seed": 1})
	waitFor(t, 60*time.Second, "alpha's long job running", func() bool {
		var v schemas.JobView
		c := api.get(t, alpha, "/v1/jobs/"+long.ID)
		c.decode(t, &v)
		return v.State == schemas.StateRunning && v.Steps >= 10
	}, api.proc, coord)
	small := api.submit(t, beta, map[string]any{"task": "hanoi", "params": map[string]any{"disks": 3}, "k": 2, "seed": 2})
	api.waitJob(t, beta, small.ID, 90*time.Second, schemas.StateSolved)
	var lv schemas.JobView
	api.get(t, alpha, "/v1/jobs/"+long.ID).decode(t, &lv)
	if lv.Finished {
		t.Fatalf("alpha's 4,095-step job finished before beta's 7-step job: no fair sharing to see")
	}
	// Alpha's job goes on where it stopped.
	before := lv.Steps
	waitFor(t, 60*time.Second, "alpha's job to run on", func() bool {
		var v schemas.JobView
		api.get(t, alpha, "/v1/jobs/"+long.ID).decode(t, &v)
		return v.State == schemas.StateRunning && v.Steps > before
	}, api.proc, coord)
	if c := api.postJSON(t, alpha, "/v1/jobs/"+long.ID+"/cancel", nil); c.status != http.StatusOK {
		t.Errorf("cancel alpha's job: %d %s", c.status, c.body)
	}
}
