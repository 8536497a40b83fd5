package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/client/apierr"
	"github.com/makerfleet/makerfleet/client/httpapi"
	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

// realAPI is maker serve's server (internal/api) on a fleet (fleettest:
// real nats-server and redis-server, a coordinator and a voter), with a
// key for each of two tenants; f is the fleet behind it.
func realAPI(t *testing.T) (alpha, beta *httpapi.Client, srv *httptest.Server, f *fleettest.Env) {
	t.Helper()
	f = fleettest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	keys := apikey.New(f.Topo)
	if err := keys.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(keys.Stop)
	s, err := api.New(api.Deps{
		NC: f.NC, Topo: f.Topo, Tasks: f.Tasks, Auth: keys,
		Batches: batch.NewStore(f.Topo, taskreg.New(f.Topo.Tasks, f.Tasks, taskspec.CompileSpec)),
	}, api.Config{Logger: f.Log})
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewServer(s)
	t.Cleanup(func() {
		s.CloseStreams()
		srv.Close()
	})
	f.StartCoordinator(coordinator.Config{})
	f.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{Concurrency: 4})
	client := func(tenant string) *httpapi.Client {
		key, _, err := keys.Create(ctx, apikey.CreateOptions{Tenant: tenant, RatePerSec: 1000, Burst: 1000}) // the tests poll
		if err != nil {
			t.Fatal(err)
		}
		c, err := httpapi.New(srv.URL, key, httpapi.Options{HTTPClient: srv.Client()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return client("alpha"), client("beta"), srv, f
}

// TestOneVocabulary: the NATS client and the HTTP client answer the same
// requests with the same sentinels (package apierr), so a program treats
// an error alike whichever client it holds.
func TestOneVocabulary(t *testing.T) {
	t.Parallel()
	alpha, _, _, f := realAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := client.Dial(ctx, f.NATS.URL, client.WithTenant("alpha"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.Close() }()
	done := schemas.JobSpec{JobID: "done", Task: "hanoi", Params: json.RawMessage(`{"disks":3}`), K: 1}
	if _, err := nc.Submit(ctx, done); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Wait(ctx, "done", nil); err != nil {
		t.Fatal(err)
	}
	request := func(s schemas.JobSpec) schemas.JobRequest {
		return schemas.JobRequest{JobID: s.JobID, Task: s.Task, Params: s.Params, K: s.K}
	}
	other := done
	other.K = 2
	invalid := done
	invalid.JobID, invalid.K = "bad", -1
	for _, c := range []struct {
		name       string
		nats, http func() error
		want       error
	}{
		{"unknown job",
			func() error { _, err := nc.Result(ctx, "nope"); return err },
			func() error { _, err := alpha.Result(ctx, "nope"); return err }, apierr.ErrNotFound},
		{"pause a finished job",
			func() error { _, err := nc.Pause(ctx, "done"); return err },
			func() error { _, err := alpha.Pause(ctx, "done"); return err }, apierr.ErrFinished},
		{"another job under a taken id",
			func() error { _, err := nc.Submit(ctx, other); return err },
			func() error { _, err := alpha.Submit(ctx, request(other)); return err }, apierr.ErrConflict},
		{"an invalid job",
			func() error { _, err := nc.Submit(ctx, invalid); return err },
			func() error { _, err := alpha.Submit(ctx, request(invalid)); return err }, apierr.ErrInvalid},
	} {
		if err := c.nats(); !errors.Is(err, c.want) {
			t.Errorf("%s over NATS: %v, want %v", c.name, err, c.want)
		}
		if err := c.http(); !errors.Is(err, c.want) {
			t.Errorf("%s over HTTP: %v, want %v", c.name, err, c.want)
		}
	}
	if client.ErrNotFound != httpapi.ErrNotFound || client.ErrInvalid != httpapi.ErrInvalid {
		t.Error("the clients' sentinels are not the same values")
	}
}

// TestRealServer: the client against maker serve's real server: a job
// submitted, followed over SSE to its report, read back; another tenant
// sees none of it; refusals are problems with their sentinels.
func TestRealServer(t *testing.T) {
	t.Parallel()
	alpha, beta, srv, _ := realAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	created, err := alpha.Submit(ctx, schemas.JobRequest{JobID: "h1", Task: "hanoi", Params: json.RawMessage(`{"disks":3}`), K: 1, Seed: 2})
	if err != nil || created.ID != "h1" || created.Tenant != "alpha" || created.Duplicate {
		t.Fatalf("submit: %+v, %v", created, err)
	}
	statuses := 0
	rep, err := alpha.Wait(ctx, "h1", func(schemas.JobStatus) { statuses++ })
	if err != nil || !rep.Solved || rep.Steps != 7 {
		t.Fatalf("wait: %+v, %v", rep, err)
	}
	if statuses == 0 {
		t.Error("no status event before the report")
	}
	got, err := alpha.Result(ctx, "h1")
	if err != nil || got.TraceSHA256 != rep.TraceSHA256 {
		t.Errorf("result: %v", err)
	}
	if again, err := alpha.Submit(ctx, schemas.JobRequest{JobID: "h1", Task: "hanoi", Params: json.RawMessage(`{"disks":3}`), K: 1, Seed: 2}); err != nil || !again.Duplicate {
		t.Errorf("resubmit: %+v, %v", again, err)
	}
	list, err := alpha.List(ctx, httpapi.ListOptions{})
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].ID != "h1" {
		t.Errorf("alpha's list: %+v, %v", list, err)
	}
	if list, err := beta.List(ctx, httpapi.ListOptions{}); err != nil || len(list.Jobs) != 0 {
		t.Errorf("beta's list: %+v, %v", list, err)
	}

	var pe *httpapi.ProblemError
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"another tenant's job", func() error { _, err := beta.Job(ctx, "h1"); return err }, httpapi.ErrNotFound},
		{"another tenant's result", func() error { _, err := beta.Result(ctx, "h1"); return err }, httpapi.ErrNotFound},
		{"another tenant's events", func() error { _, err := beta.Wait(ctx, "h1", nil); return err }, httpapi.ErrNotFound},
		{"pause a finished job", func() error { _, err := alpha.Pause(ctx, "h1"); return err }, httpapi.ErrConflict},
		{"decide with a tenant key", func() error {
			_, err := alpha.Decide(ctx, "h1", schemas.DecideBody{Step: 0, Answer: "x"})
			return err
		}, httpapi.ErrForbidden},
		{"conflicting job", func() error {
			_, err := alpha.Submit(ctx, schemas.JobRequest{JobID: "h1", Task: "hanoi", Params: json.RawMessage(`{"disks":4}`), K: 1})
			return err
		}, httpapi.ErrConflict},
		{"invalid params", func() error {
			_, err := alpha.Submit(ctx, schemas.JobRequest{Task: "hanoi", Params: json.RawMessage(`{"disks":99}`), K: 1})
			return err
		}, httpapi.ErrInvalid},
		{"unknown key", func() error {
			c, _ := httpapi.New(srv.URL, "mk_000000000000_nope", httpapi.Options{HTTPClient: srv.Client()})
			_, err := c.Job(ctx, "h1")
			return err
		}, httpapi.ErrUnauthorized},
	} {
		err := tc.call()
		if !errors.Is(err, tc.want) || !errors.As(err, &pe) {
			t.Errorf("%s: %v, want a problem matching %v", tc.name, err, tc.want)
		}
	}
	_, err = alpha.Submit(ctx, schemas.JobRequest{Task: "hanoi", Params: json.RawMessage(`{"disks":99}`), K: 1})
	if errors.As(err, &pe); len(pe.Errors) == 0 || !strings.HasPrefix(pe.Errors[0].Path, "/params") {
		t.Errorf("422 fields: %+v", pe)
	}
}

// TestRealServerBatch: a batch through the real server, its output in
// input order, its error file with the invalid line; another tenant's
// batch is 404.
func TestRealServerBatch(t *testing.T) {
	t.Parallel()
	alpha, beta, _, _ := realAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	input := `{"custom_id": "a", "task": "hanoi", "params": {"disks": 2}, "k": 1}
{"custom_id": "b", "task": "hanoi", "params": {"disks": "x"}, "k": 1}
{"custom_id": "c", "task": "hanoi", "params": {"disks": 3}, "k": 1}
`
	rec, err := alpha.SubmitBatch(ctx, strings.NewReader(input), httpapi.BatchOptions{Priority: 2, Window: 1})
	if err != nil || rec.Counts.Total != 3 || rec.Counts.Invalid != 1 || rec.Window != 1 || rec.Priority != 2 {
		t.Fatalf("submit batch: %+v, %v", rec, err)
	}
	// No event stream for batches over HTTP: poll its record.
	fleettest.Eventually(t, 30*time.Second, func() bool {
		rec, err = alpha.Batch(ctx, rec.ID)
		return err == nil && rec.State == schemas.BatchCompleted
	}, "batch never completed: %+v, %v", rec, err)
	var out strings.Builder
	if err := alpha.BatchOutput(ctx, rec.ID, &out); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var o schemas.BatchOutputLine
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.CustomID)
	}
	if strings.Join(ids, " ") != "a b c" {
		t.Errorf("output order %v", ids)
	}
	var errs strings.Builder
	if err := alpha.BatchErrors(ctx, rec.ID, &errs); err != nil || strings.Count(errs.String(), "\n") != 1 || !strings.Contains(errs.String(), `"b"`) {
		t.Errorf("error file %q, %v", errs.String(), err)
	}
	if list, err := alpha.ListBatches(ctx); err != nil || len(list) != 1 {
		t.Errorf("list: %+v, %v", list, err)
	}
	if _, err := beta.Batch(ctx, rec.ID); !errors.Is(err, httpapi.ErrNotFound) {
		t.Errorf("beta reads alpha's batch: %v", err)
	}
	if _, err := alpha.CancelBatch(ctx, rec.ID); !errors.Is(err, httpapi.ErrConflict) {
		t.Errorf("cancel a completed batch: %v, want a conflict", err)
	}
}
