package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/schemas"
)

// steps reads a job's step stream (after seq after, 0: from the start)
// until it ends, and returns its step summaries and last status.
func (e *apiEnv) steps(ctx context.Context, tenant, id string, after uint64) ([]schemas.StepSummary, schemas.JobStatus) {
	e.t.Helper()
	path := "/v1/jobs/" + id + "/steps"
	if after > 0 {
		path += "?after=" + strconv.FormatUint(after, 10)
	}
	var (
		out  []schemas.StepSummary
		last schemas.JobStatus
	)
	for ev := range e.stream(ctx, path, e.key[tenant]) {
		switch ev.name {
		case "step":
			var s schemas.StepSummary
			if err := json.Unmarshal([]byte(ev.data), &s); err != nil {
				e.t.Fatalf("step %s: %v", ev.data, err)
			}
			out = append(out, s)
		case "status":
			if err := schemas.Decode([]byte(ev.data), &last); err != nil {
				e.t.Fatalf("status %s: %v", ev.data, err)
			}
		}
	}
	if ctx.Err() != nil {
		e.t.Fatal("the step stream did not end with its job")
	}
	return out, last
}

// TestJobStepsStream: a job's step stream sends a summary of each journal
// entry in order (every step decided once, with its counts) and the job's
// statuses, and ends once the job's end is sent; ?after= resumes after an
// entry.
func TestJobStepsStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{run: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const disks, k = 3, 2
	c := e.submit(alpha, hanoi(disks))
	all, last := e.steps(ctx, alpha, c.ID, 0)
	if last.State != schemas.StateSolved || last.Steps != 1<<disks-1 {
		t.Fatalf("last status %+v, want solved after %d steps", last, 1<<disks-1)
	}
	decided := map[int64]bool{}
	var prev uint64
	for _, s := range all {
		if s.Seq <= prev {
			t.Errorf("entry %d after %d: out of order", s.Seq, prev)
		}
		prev = s.Seq
		if s.Type != schemas.EntryDecision {
			continue
		}
		if decided[s.Step] {
			t.Errorf("step %d decided twice", s.Step)
		}
		decided[s.Step] = true
		if s.Rung != schemas.RungOwnModel || s.Lead < k || s.Votes < s.Lead || s.Valid < s.Votes ||
			s.Counted != s.Valid+s.RedFlagged || s.Samples < s.Counted {
			t.Errorf("step %d: implausible summary %+v", s.Step, s)
		}
	}
	if len(decided) != 1<<disks-1 {
		t.Errorf("%d steps decided in the stream, want %d", len(decided), 1<<disks-1)
	}
	if end := all[len(all)-1]; end.Type != schemas.EntryEnd || end.State != schemas.StateSolved {
		t.Errorf("last entry %+v, want the solved end", end)
	}

	// Resuming after the third entry sends the rest, then ends.
	rest, _ := e.steps(ctx, alpha, c.ID, all[2].Seq)
	if len(rest) != len(all)-3 || rest[0].Seq != all[3].Seq {
		t.Errorf("after %d: %d entries from %+v, want %d from %d", all[2].Seq, len(rest), rest[0], len(all)-3, all[3].Seq)
	}
	// After the end: nothing but the status, and the stream ends.
	if none, st := e.steps(ctx, alpha, c.ID, all[len(all)-1].Seq); len(none) != 0 || st.State != schemas.StateSolved {
		t.Errorf("after the end: %d entries, status %q", len(none), st.State)
	}
}

// TestJobStepsRefused: another tenant's job is 404 on the step stream, as
// an unknown one; a bad ?after= is 400; the stream shares the event
// streams' cap per key.
func TestJobStepsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{MaxStreamsPerKey: 1, RatePerSec: 1000, Burst: 1000}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.submit(alpha, hanoi(3)) // queued: no coordinator runs, the stream stays open
	path := "/v1/jobs/" + c.ID + "/steps"
	e.json(http.MethodGet, path, e.key[beta], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, path+"?tenant="+alpha, e.key[beta], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, "/v1/jobs/nosuchjob/steps", e.key[alpha], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, path, "", nil).problem(t, http.StatusUnauthorized, api.TypeUnauthorized)
	e.json(http.MethodGet, path+"?after=-1", e.key[alpha], nil).problem(t, http.StatusBadRequest, api.TypeBadRequest)

	if got := e.openStream(ctx, path, e.key[alpha]); got != http.StatusOK {
		t.Fatalf("alpha's stream: %d", got)
	}
	// The key's one stream is taken: the events stream is refused too.
	e.json(http.MethodGet, "/v1/jobs/"+c.ID+"/events", e.key[alpha], nil).problem(t, http.StatusTooManyRequests, api.TypeRateLimited)
	// The admin key reads another tenant's stream with ?tenant=.
	if got := e.openStream(ctx, path+"?tenant="+alpha, e.admin); got != http.StatusOK {
		t.Fatalf("admin's stream of alpha's job: %d", got)
	}
}
