package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/journal"
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
	// Once retention sweeps the status, the figures come from the report.
	if err := e.fleet.Topo.Status.Purge(ctx, bus.JobKey(alpha, c.ID)); err != nil {
		t.Fatal(err)
	}
	if _, st := e.steps(ctx, alpha, c.ID, all[len(all)-1].Seq); st.Steps != last.Steps || st.Samples != last.Samples ||
		st.Votes != last.Votes || st.TotalSteps != last.TotalSteps || st.Progress != 1 || st.State != schemas.StateSolved {
		t.Errorf("status without its status record %+v, want the figures of %+v", st, last)
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
	for _, q := range []string{"?after=-1", "?after=18446744073709551615", "?after=9223372036854775808", "?tail=-1", "?tail=100001", "?tail=x"} {
		e.json(http.MethodGet, path+q, e.key[alpha], nil).problem(t, http.StatusBadRequest, api.TypeBadRequest)
	}
	// A Last-Event-ID past any journal sequence is refused too, not a 503.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.http.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.key[alpha])
	req.Header.Set("Last-Event-ID", "18446744073709551615")
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("Last-Event-ID 2^64-1: %d, want 400", resp.StatusCode)
	}

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

// journalOf opens tenant/id's journal to write entries into it by hand,
// as a coordinator would, and returns a function appending n decisions.
func (e *apiEnv) journalOf(ctx context.Context, tenant, id string) func(n int) []uint64 {
	e.t.Helper()
	topo := e.fleet.Topo
	j, _, err := journal.Open(ctx, topo.JS, topo.NS, tenant, id)
	if err != nil {
		e.t.Fatal(err)
	}
	var step int64
	return func(n int) []uint64 {
		e.t.Helper()
		var seqs []uint64
		for range n {
			d := &schemas.JournalEntry{
				Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: tenant, JobID: id,
				Type: schemas.EntryDecision, Token: 1, Owner: "c1", Step: step, Epoch: schemas.EpochsPerLease,
				VoteKey: fmt.Sprintf("move-%d", step), Votes: 2, Lead: 2, Valid: 2, Counted: 2, At: time.Now().UTC(),
			}
			seq, err := j.Append(ctx, d)
			if err != nil {
				e.t.Fatal(err)
			}
			seqs = append(seqs, seq)
			step++
		}
		return seqs
	}
}

// nextSteps reads the stream's events until n steps came and returns
// their sequences.
func nextSteps(t *testing.T, evs <-chan sse, n int) []uint64 {
	t.Helper()
	var seqs []uint64
	for len(seqs) < n {
		ev, ok := <-evs
		if !ok {
			t.Fatalf("the stream ended after %d of %d steps", len(seqs), n)
		}
		if ev.name != "step" {
			continue
		}
		var s schemas.StepSummary
		if err := json.Unmarshal([]byte(ev.data), &s); err != nil {
			t.Fatalf("step %s: %v", ev.data, err)
		}
		seqs = append(seqs, s.Seq)
	}
	return seqs
}

// TestJobStepsTail: ?tail=K sends exactly the last K entries of a
// journal, then each new one as it is written; tail=0 sends them all; a
// stream without tail, after or Last-Event-ID sends at most
// DefaultStepTail.
func TestJobStepsTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{RatePerSec: 1000, Burst: 1000}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.submit(alpha, hanoi(3)) // queued: no coordinator runs, the stream stays open
	write := e.journalOf(ctx, alpha, c.ID)
	seqs := write(30)
	path := "/v1/jobs/" + c.ID + "/steps"
	for _, tc := range []struct {
		query string
		want  []uint64
	}{
		{"?tail=7", seqs[23:]},
		{"?tail=1", seqs[29:]},
		{"?tail=30", seqs},
		{"?tail=100", seqs},
		{"?tail=0", seqs},
		{"", seqs},
		{"?tail=2&after=" + strconv.FormatUint(seqs[9], 10), seqs[10:]}, // a resume ignores tail
	} {
		sctx, scancel := context.WithCancel(ctx)
		evs := e.stream(sctx, path+tc.query, e.key[alpha])
		if got := nextSteps(t, evs, len(tc.want)); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%q: steps %v, want %v", tc.query, got, tc.want)
		}
		scancel()
		for range evs { // wait for the reader to end
		}
	}
	// After its tail, a stream follows the journal.
	evs := e.stream(ctx, path+"?tail=3", e.key[alpha])
	if got := nextSteps(t, evs, 3); fmt.Sprint(got) != fmt.Sprint(seqs[27:]) {
		t.Errorf("tail=3: steps %v, want %v", got, seqs[27:])
	}
	more := write(2)
	if got := nextSteps(t, evs, 2); fmt.Sprint(got) != fmt.Sprint(more) {
		t.Errorf("tail=3: new steps %v, want %v", got, more)
	}
}

// TestJobStepsEndOnPurge: a job's step and event streams end when the job
// is purged (its report, status and record deleted) while they are open,
// whatever the order of the deletes.
func TestJobStepsEndOnPurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{RatePerSec: 1000, Burst: 1000, Heartbeat: 50 * time.Millisecond}})
	topo := e.fleet.Topo
	for _, tc := range []struct {
		name   string
		stream string
		kvs    []jetstream.KeyValue // deleted in this order
	}{
		{"steps, record first", "steps", []jetstream.KeyValue{topo.Jobs, topo.Reports, topo.Status}},
		{"steps, record last", "steps", []jetstream.KeyValue{topo.Reports, topo.Status, topo.Jobs}},
		{"events, record last", "events", []jetstream.KeyValue{topo.Status, topo.Reports, topo.Jobs}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c := e.submit(alpha, hanoi(3)) // queued: the stream stays open
			evs := e.stream(ctx, "/v1/jobs/"+c.ID+"/"+tc.stream, e.key[alpha])
			if ev := <-evs; ev.name != "status" {
				t.Fatalf("first event %+v, want the status", ev)
			}
			key := bus.JobKey(alpha, c.ID)
			for _, kv := range tc.kvs {
				if err := kv.Purge(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			for range evs { // pings until the stream ends
			}
			if ctx.Err() != nil {
				t.Fatal("the stream of a purged job did not end")
			}
		})
	}
}
