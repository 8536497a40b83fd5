package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/client/httpapi"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testKey = "mk_0123456789ab_secret"

// problem answers a problem of type typ.
func problem(w http.ResponseWriter, status int, typ, detail string, fields ...schemas.FieldError) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(schemas.Problem{
		Type: "https://makerfleet.dev/problems/" + typ, Title: http.StatusText(status), Status: status,
		Detail: detail, Errors: fields,
	})
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fakeAPI is a stand-in for maker serve: canned answers, checked requests.
func fakeAPI(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("submit content type %q", ct)
		}
		var req schemas.JobRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			problem(w, 400, "bad-request", err.Error())
			return
		}
		switch {
		case req.K < 1:
			problem(w, 422, "invalid-request", "k must be >= 1", schemas.FieldError{Path: "/k", Message: "k must be >= 1"})
		case req.BudgetUSD > 0 && req.BudgetUSD < 1:
			problem(w, 422, "over-budget", "budget_usd 0.5 below the forecast's lowest cost 1")
		case req.JobID == "taken":
			problem(w, 409, "conflict", "taken by another job")
		default:
			answer(w, 201, schemas.JobCreated{ID: "j1", Tenant: "alpha", Forecast: &schemas.Forecast{Steps: 7}})
		}
	})
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("state") != "running" || q.Get("limit") != "2" || q.Get("cursor") != "c1" {
			t.Errorf("list query %q", r.URL.RawQuery)
		}
		answer(w, 200, schemas.JobList{Jobs: []schemas.JobView{{ID: "j1"}, {ID: "j2"}}, NextCursor: "c2"})
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		if id := r.PathValue("id"); id != "j1" {
			problem(w, 404, "not-found", "unknown job alpha/"+id)
			return
		}
		answer(w, 200, schemas.JobView{ID: "j1", Tenant: "alpha", State: schemas.StateRunning, Steps: 3, TotalSteps: 7})
	})
	mux.HandleFunc("GET /v1/jobs/{id}/result", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(409)
		_ = json.NewEncoder(w).Encode(schemas.Problem{Type: "https://makerfleet.dev/problems/not-finished", Title: "Job not finished", Status: 409, State: "running"})
	})
	mux.HandleFunc("POST /v1/jobs/{id}/{action}", func(w http.ResponseWriter, r *http.Request) {
		action := r.PathValue("action")
		if action == "decide" {
			var d schemas.DecideBody
			if err := json.NewDecoder(r.Body).Decode(&d); err != nil || d.Step != 4 || d.Answer != "x" {
				t.Errorf("decide body %+v, %v", d, err)
			}
			problem(w, 409, "not-waiting", "step 4 is not waiting for a person")
			return
		}
		control := map[string]string{"pause": "pause", "resume": "run", "cancel": "cancel"}[action]
		answer(w, 200, schemas.ControlResult{ID: r.PathValue("id"), Tenant: "alpha", State: "running", Control: control, Changed: true})
	})
	mux.HandleFunc("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(w, ": ping\n\nevent: status\ndata: {\"tenant\":\"alpha\",\"job_id\":\"j1\",\"steps\":%d}\n\n", i)
			fl.Flush()
		}
		// A multi-line data field, CRLF line ends.
		fmt.Fprint(w, "event: report\r\ndata: {\"job_id\":\"j1\",\r\ndata: \"steps\":7, \"solved\":true}\r\n\r\n")
		fl.Flush()
	})
	mux.HandleFunc("POST /v1/batches", func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "application/jsonl" {
			t.Errorf("batch content type %q", ct)
		}
		if r.URL.Query().Get("priority") != "3" || r.URL.Query().Get("window") != "" {
			t.Errorf("batch query %q", r.URL.RawQuery)
		}
		n := 0
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			n++
		}
		answer(w, 201, schemas.BatchRecord{ID: "batch_1", Tenant: "alpha", State: schemas.BatchQueued, Counts: schemas.BatchCounts{Total: int64(n)}})
	})
	mux.HandleFunc("GET /v1/batches/{id}/output", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/jsonl")
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(w, "{\"custom_id\":\"c%d\",\"line\":%d,\"response\":null,\"error\":null}\n", i, i)
		}
	})
	mux.HandleFunc("GET /v1/usage", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		problem(w, 429, "rate-limited", "slow down")
	})
	mux.HandleFunc("GET /v1/batches", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(502)
		fmt.Fprint(w, "<html>bad gateway</html>")
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			problem(w, 401, "unauthorized", "missing or unknown API key")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newClient(t *testing.T, srv *httptest.Server, key string) *httpapi.Client {
	t.Helper()
	c, err := httpapi.New(srv.URL+"/", key, httpapi.Options{HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFakeJobs(t *testing.T) {
	t.Parallel()
	srv := fakeAPI(t)
	c := newClient(t, srv, testKey)
	ctx := context.Background()

	created, err := c.Submit(ctx, schemas.JobRequest{Task: "hanoi", Params: json.RawMessage(`{"disks":3}`), K: 2})
	if err != nil || created.ID != "j1" || created.Forecast == nil || created.Forecast.Steps != 7 {
		t.Fatalf("submit: %+v, %v", created, err)
	}
	view, err := c.Job(ctx, "j1")
	if err != nil || view.Steps != 3 || view.State != schemas.StateRunning {
		t.Fatalf("job: %+v, %v", view, err)
	}
	list, err := c.List(ctx, httpapi.ListOptions{State: "running", Limit: 2, Cursor: "c1"})
	if err != nil || len(list.Jobs) != 2 || list.NextCursor != "c2" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	for name, do := range map[string]func(context.Context, string) (schemas.ControlResult, error){
		"pause": c.Pause, "run": c.Resume, "cancel": c.Cancel,
	} {
		res, err := do(ctx, "j1")
		if err != nil || res.Control != name || !res.Changed {
			t.Errorf("%s: %+v, %v", name, res, err)
		}
	}
	var steps []int64
	rep, err := c.Wait(ctx, "j1", func(st schemas.JobStatus) { steps = append(steps, st.Steps) })
	if err != nil || !rep.Solved || rep.Steps != 7 {
		t.Fatalf("wait: %+v, %v", rep, err)
	}
	if fmt.Sprint(steps) != "[1 2 3]" {
		t.Errorf("statuses at steps %v, want [1 2 3]", steps)
	}
}

// TestFakeProblems: each error answer is a *ProblemError that matches
// its sentinels, with the server's details.
func TestFakeProblems(t *testing.T) {
	t.Parallel()
	srv := fakeAPI(t)
	c := newClient(t, srv, testKey)
	ctx := context.Background()
	tests := []struct {
		name   string
		call   func() error
		want   []error
		status int
	}{
		{"unknown key", func() error { _, err := newClient(t, srv, "mk_bad").Job(ctx, "j1"); return err }, []error{httpapi.ErrUnauthorized}, 401},
		{"unknown job", func() error { _, err := c.Job(ctx, "nope"); return err }, []error{httpapi.ErrNotFound}, 404},
		{"invalid field", func() error { _, err := c.Submit(ctx, schemas.JobRequest{Task: "hanoi"}); return err }, []error{httpapi.ErrInvalid}, 422},
		{"over budget", func() error {
			_, err := c.Submit(ctx, schemas.JobRequest{Task: "hanoi", K: 1, BudgetUSD: 0.5})
			return err
		}, []error{httpapi.ErrOverBudget, httpapi.ErrInvalid}, 422},
		{"conflict", func() error { _, err := c.Submit(ctx, schemas.JobRequest{JobID: "taken", K: 1}); return err }, []error{httpapi.ErrConflict}, 409},
		{"not finished", func() error { _, err := c.Result(ctx, "j1"); return err }, []error{httpapi.ErrNotFinished, httpapi.ErrConflict}, 409},
		{"not waiting", func() error {
			_, err := c.Decide(ctx, "j1", schemas.DecideBody{Step: 4, Answer: "x"})
			return err
		}, []error{httpapi.ErrNotWaiting, httpapi.ErrConflict}, 409},
		{"rate limited", func() error { _, err := c.Usage(ctx); return err }, []error{httpapi.ErrRateLimited}, 429},
		{"no problem body", func() error { _, err := c.ListBatches(ctx); return err }, []error{httpapi.ErrUnavailable}, 502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var pe *httpapi.ProblemError
			if !errors.As(err, &pe) || pe.Status != tt.status {
				t.Fatalf("%v, want a %d problem", err, tt.status)
			}
			for _, w := range tt.want {
				if !errors.Is(err, w) {
					t.Errorf("%v is not %v", err, w)
				}
			}
			if errors.Is(err, httpapi.ErrFinished) {
				t.Errorf("%v matches ErrFinished", err)
			}
		})
	}
	_, err := c.Submit(ctx, schemas.JobRequest{Task: "hanoi"})
	var pe *httpapi.ProblemError
	if errors.As(err, &pe); len(pe.Errors) != 1 || pe.Errors[0].Path != "/k" {
		t.Errorf("422 fields %+v", pe.Errors)
	}
	_, err = c.Usage(ctx)
	if errors.As(err, &pe); pe.RetryAfter != 7*time.Second {
		t.Errorf("retry after %v, want 7s", pe.RetryAfter)
	}
	_, err = c.Result(ctx, "j1")
	if errors.As(err, &pe); pe.State != "running" {
		t.Errorf("not finished state %q", pe.State)
	}
}

func TestFakeBatch(t *testing.T) {
	t.Parallel()
	srv := fakeAPI(t)
	c := newClient(t, srv, testKey)
	ctx := context.Background()
	pr, pw := io.Pipe()
	go func() {
		for i := range 5 {
			fmt.Fprintf(pw, `{"custom_id":"c%d","task":"hanoi","params":{"disks":2},"k":1}`+"\n", i)
		}
		_ = pw.Close()
	}()
	rec, err := c.SubmitBatch(ctx, pr, httpapi.BatchOptions{Priority: 3})
	if err != nil || rec.ID != "batch_1" || rec.Counts.Total != 5 {
		t.Fatalf("submit batch: %+v, %v", rec, err)
	}
	var out strings.Builder
	if err := c.BatchOutput(ctx, "batch_1", &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 3 || !strings.HasPrefix(out.String(), `{"custom_id":"c1"`) {
		t.Errorf("output %q", out.String())
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ url, key string }{
		{"127.0.0.1:8080", "k"}, {"ftp://h", "k"}, {"http://", "k"}, {"http://h", ""}, {"http://h\x7f", "k"},
	} {
		if _, err := httpapi.New(tt.url, tt.key, httpapi.Options{}); !errors.Is(err, httpapi.ErrInvalid) {
			t.Errorf("New(%q, %q): %v, want ErrInvalid", tt.url, tt.key, err)
		}
	}
}
