package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// TestSpecProblem: a job spec that does not prepare is a 422 naming the
// failing field, with a detail free of package prefixes.
func TestSpecProblem(t *testing.T) {
	t.Parallel()
	tasks := taskreg.New(nil, builtin.Registry(), taskspec.CompileSpec)
	cases := []struct {
		name string
		req  string
		path string
	}{
		{"k", `{"task":"hanoi","params":{"disks":3},"k":-1}`, "/k"},
		{"k unplannable", `{"task":"hanoi","params":{"disks":3},"p_estimate":0.5}`, "/k"},
		{"disks", `{"task":"hanoi","params":{"disks":0},"k":2}`, "/params/disks"},
		{"params shape", `{"task":"hanoi","params":[1],"k":2}`, "/params"},
		{"unknown param", `{"task":"hanoi","params":{"disks":3,"bogus":1},"k":2}`, "/params/bogus"},
		{"param type", `{"task":"hanoi","params":{"disks":"x"},"k":2}`, "/params/disks"},
		{"task", `{"task":"nope","params":{},"k":2}`, "/task"},
		{"task name", `{"task":"No Such","params":{},"k":2}`, "/task"},
		{"job id", `{"job_id":"-x","task":"hanoi","params":{"disks":3},"k":2}`, "/job_id"},
		{"temperature", `{"task":"hanoi","params":{"disks":3},"k":2,"temperature_first":3}`, "/temperature_first"},
		{"escalation", `{"task":"hanoi","params":{"disks":3},"k":2,"escalation":{"stronger_model":"m","stronger_samples":1}}`, "/escalation/stronger_samples"},
		{"valid fraction", `{"task":"hanoi","params":{"disks":3},"k":2,"valid_fraction":2}`, "/valid_fraction"},
		{"output price", `{"task":"hanoi","params":{"disks":3},"k":2,"pricing":{"input_usd_per_mtok":1,"output_usd_per_mtok":-2}}`, "/pricing/output_usd_per_mtok"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var req schemas.JobRequest
			if err := json.Unmarshal([]byte(c.req), &req); err != nil {
				t.Fatal(err)
			}
			spec := req.Spec("alpha")
			err := jobs.Prepare(context.Background(), &spec, tasks)
			if err == nil {
				t.Fatal("prepared")
			}
			pe := asProblem(fmt.Errorf("%w", err))
			if pe.p.Status != http.StatusUnprocessableEntity || len(pe.p.Errors) == 0 || pe.p.Errors[0].Path != c.path {
				t.Fatalf("problem %+v, want a 422 at %s (error %v)", pe.p, c.path, err)
			}
			for _, junk := range []string{"schemas:", "invalid message", "job_spec", "invalid job:"} {
				if strings.Contains(pe.p.Detail, junk) {
					t.Errorf("detail %q holds %q", pe.p.Detail, junk)
				}
			}
		})
	}
}

// TestAsProblem: sentinels map to their statuses; anything else is a 500
// that says nothing of the error.
func TestAsProblem(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		status int
		typ    string
	}{
		{jobs.ErrNotFound, 404, TypeNotFound},
		{fmt.Errorf("x: %w", jobs.ErrFinished), 409, TypeFinished},
		{jobs.ErrNotWaiting, 409, TypeNotWaiting},
		{jobs.ErrConflict, 409, TypeConflict},
		{fmt.Errorf("%w: nats timeout", jobs.ErrUnavailable), 503, TypeUnavailable},
		{errors.New("secret internals"), 500, TypeInternal},
	} {
		pe := asProblem(c.err)
		if pe.p.Status != c.status || pe.p.Type != ProblemBase+c.typ || pe.p.Title == "" {
			t.Errorf("%v: %+v", c.err, pe.p)
		}
		if strings.Contains(pe.p.Detail, "secret") || strings.Contains(pe.p.Detail, "nats") {
			t.Errorf("%v: detail %q leaks the error", c.err, pe.p.Detail)
		}
	}
}

// TestLimiter: a key's bucket refills at its rate; the 429 says when to
// come back; a key's own rate replaces the default.
func TestLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	l := newLimiters(2, 2)
	l.now = func() time.Time { return now }
	p := apikey.Principal{KeyID: "k1"}
	for i := range 2 {
		if pe := l.allow(p); pe != nil {
			t.Fatalf("request %d refused", i)
		}
	}
	pe := l.allow(p)
	if pe == nil || pe.p.Status != http.StatusTooManyRequests || pe.retryAfter != 1 {
		t.Fatalf("third request: %+v", pe)
	}
	now = now.Add(500 * time.Millisecond)
	if pe := l.allow(p); pe != nil {
		t.Error("refused after a refill")
	}
	fast := apikey.Principal{KeyID: "k2", RatePerSec: 100, Burst: 50}
	for i := range 50 {
		if pe := l.allow(fast); pe != nil {
			t.Fatalf("fast key refused at %d", i)
		}
	}
	slow := apikey.Principal{KeyID: "k3", RatePerSec: 0.01, Burst: 1}
	l.allow(slow)
	if pe := l.allow(slow); pe == nil || pe.retryAfter != 100 {
		t.Errorf("slow key: %+v", pe)
	}
}
