package batch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// newStore is a batch store on a fresh in-process nats-server.
func newStore(t *testing.T) (*batch.Store, *topology.Topology) {
	t.Helper()
	_, topo := testkit.StartTopology(t)
	return batch.NewStore(topo, taskreg.New(topo.Tasks, builtin.Registry(), taskspec.CompileSpec)), topo
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// output reads a batch's output (or error) file.
func output(t *testing.T, ctx context.Context, s *batch.Store, tenant, id string, errorsOnly bool) []schemas.BatchOutputLine {
	t.Helper()
	var buf bytes.Buffer
	write := s.Output
	if errorsOnly {
		write = s.Errors
	}
	if err := write(ctx, tenant, id, &buf); err != nil {
		t.Fatal(err)
	}
	var out []schemas.BatchOutputLine
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var l schemas.BatchOutputLine
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// stored counts the messages the batch stream holds for a batch.
func stored(t *testing.T, ctx context.Context, topo *topology.Topology, tenant, id string) uint64 {
	t.Helper()
	st, err := topo.JS.Stream(ctx, topo.NS.BatchesStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(topo.NS.BatchSubject(tenant, id)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[topo.NS.BatchSubject(tenant, id)]
}

// TestCreateHostileLines: every kind of bad line gets its own error with
// its line number in the error file (and in the output, which has one
// line per input line), and the good lines are queued as jobs of the
// caller's tenant, whatever a line says.
func TestCreateHostileLines(t *testing.T) {
	t.Parallel()
	s, topo := newStore(t)
	ctx := ctxFor(t)
	long := `{"custom_id":"long","task":"hanoi","params":{"disks":3},"k":1,"seed":` + strings.Repeat("1", 300) + `}`
	lines := []struct {
		text string
		code string // "" for a valid line
	}{
		{`{"custom_id":"a","task":"hanoi","params":{"disks":3},"k":2}`, ""},
		{`{"custom_id":"b","task":"hanoi","params":{"disks":3},"k":2`, schemas.BatchErrInvalidJSON},
		{`not json at all`, schemas.BatchErrInvalidJSON},
		{long, schemas.BatchErrLineTooLong},
		{`{"custom_id":"c","task":"nope","params":{},"k":2}`, schemas.BatchErrUnknownTask},
		{`{"custom_id":"d","task":"hanoi","params":{"disks":99},"k":2}`, schemas.BatchErrInvalidParams},
		{`{"custom_id":"e","task":"hanoi","params":{"disks":3},"k":1000000}`, schemas.BatchErrInvalidSpec},
		{`{"custom_id":"f","task":"hanoi","params":{"disks":3},"k":2,"tenant":"other"}`, schemas.BatchErrWrongTenant},
		{`{"custom_id":"g","task":"hanoi","params":{"disks":3},"k":2,"job_id":"mine"}`, schemas.BatchErrInvalidLine},
		{`{"custom_id":"h","task":"hanoi","params":{"disks":3},"k":2,"K":3}`, schemas.BatchErrInvalidLine},
		{`{"custom_id":"i","task":"hanoi","params":{"disks":3},"k":2,"k":3}`, schemas.BatchErrInvalidLine},
		{`{"task":"hanoi","params":{"disks":3},"k":2}`, schemas.BatchErrInvalidCustomID},
		{`{"custom_id":"j\u0000","task":"hanoi","params":{"disks":3},"k":2}`, schemas.BatchErrInvalidCustomID},
		{`[1,2,3]`, schemas.BatchErrInvalidLine},
		{`{"custom_id":"k","task":"hanoi","params":{"disks":3},"k":-1}`, schemas.BatchErrInvalidSpec},
		{`{"custom_id":"l","task":"hanoi","params":{"disks":3},"k":2,"priority":42}`, schemas.BatchErrInvalidSpec},
		{"{\"custom_id\":\"m\xff\",\"task\":\"hanoi\",\"params\":{},\"k\":2}", schemas.BatchErrInvalidJSON},
		{`{"custom_id":"n","task":"hanoi","params":{"disks":3},"k":2,"tenant":"acme","priority":3}`, ""},
		{`   `, "blank"},
		{`{"custom_id":"o","task":"hanoi","params":{"disks":3},"k":2,"budget_usd":5}`, schemas.BatchErrInvalidSpec},
	}
	var in strings.Builder
	in.WriteString("\xef\xbb\xbf") // a byte order mark, as some editors write
	for i, l := range lines {
		in.WriteString(l.text)
		if i%2 == 0 {
			in.WriteString("\r")
		}
		in.WriteString("\n")
	}
	rec, err := s.Create(ctx, "acme", strings.NewReader(in.String()), batch.CreateOptions{MaxLineBytes: 256, Priority: 1})
	if err != nil {
		t.Fatal(err)
	}
	var valid, invalid int64
	for _, l := range lines {
		switch l.code {
		case "":
			valid++
		case "blank":
		default:
			invalid++
		}
	}
	want := schemas.BatchCounts{Total: valid + invalid, Valid: valid, Invalid: invalid, Failed: invalid}
	if rec.Counts != want || rec.State != schemas.BatchQueued || rec.Tenant != "acme" || rec.Window != batch.DefaultWindow {
		t.Errorf("record %+v, want queued, counts %+v, window %d", rec, want, batch.DefaultWindow)
	}
	if got, err := s.Get(ctx, "acme", rec.ID); err != nil || got.Counts != want {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if got := stored(t, ctx, topo, "acme", rec.ID); got != uint64(want.Total) {
		t.Errorf("%d lines stored, want %d (one per line, blank lines none)", got, want.Total)
	}

	out := output(t, ctx, s, "acme", rec.ID, false)
	errs := output(t, ctx, s, "acme", rec.ID, true)
	if len(out) != int(want.Total) || len(errs) != int(invalid) {
		t.Fatalf("%d output lines and %d error lines, want %d and %d", len(out), len(errs), want.Total, invalid)
	}
	i, e := 0, 0
	for n, l := range lines {
		if l.code == "blank" {
			continue
		}
		o := out[i]
		i++
		line := int64(n + 1)
		if o.Line != line || o.ID != schemas.BatchJobID(rec.ID, line) || o.Response != nil {
			t.Errorf("output line %d: %+v", line, o)
			continue
		}
		if l.code == "" {
			if o.JobID != schemas.BatchJobID(rec.ID, line) || o.Error == nil || o.Error.Code != schemas.BatchErrNotFinished {
				t.Errorf("line %d (valid, not fed yet): %+v", line, o)
			}
			continue
		}
		if o.Error == nil || o.Error.Code != l.code || o.JobID != "" {
			t.Errorf("line %d: error %+v, want code %s", line, o.Error, l.code)
		}
		if errs[e].Line != line || errs[e].Error.Code != l.code {
			t.Errorf("error file line %d: %+v, want line %d", e, errs[e], line)
		}
		e++
	}
	// Nothing is enqueued by Create: the runner feeds the jobs.
	js, err := topo.JS.Stream(ctx, topo.NS.JobsStream())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := js.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("job stream holds %v messages (%v), want none", info.State.Msgs, err)
	}
	if _, err := topo.Jobs.Get(ctx, bus.JobKey("acme", schemas.BatchJobID(rec.ID, 1))); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("line 1's job is registered before any runner fed it: %v", err)
	}
}

// TestCreateRefused: a batch that cannot run as a whole is refused with
// ErrInvalid naming the lines, and nothing of it is kept.
func TestCreateRefused(t *testing.T) {
	t.Parallel()
	s, topo := newStore(t)
	good := func(id string) string {
		return fmt.Sprintf(`{"custom_id":%q,"task":"hanoi","params":{"disks":3},"k":2}`+"\n", id)
	}
	many := strings.Repeat(good("x"), 1) + good("y") + good("z")
	tests := []struct {
		name string
		in   io.Reader
		o    batch.CreateOptions
		msg  string
	}{
		{"duplicate custom_id", strings.NewReader(good("a") + good("b") + "\n" + good("a")), batch.CreateOptions{}, `line 4: duplicate custom_id "a" (first on line 1)`},
		{"duplicate of an invalid line's id", strings.NewReader(`{"custom_id":"a","task":"nope","params":{},"k":2}` + "\n" + good("a")), batch.CreateOptions{}, `line 2: duplicate custom_id "a" (first on line 1)`},
		{"empty", strings.NewReader(""), batch.CreateOptions{}, "no lines"},
		{"blank lines only", strings.NewReader("\n  \r\n\t\n"), batch.CreateOptions{}, "no lines"},
		{"too many lines", strings.NewReader(many), batch.CreateOptions{MaxLines: 2}, "line 3: more than 2 lines"},
		{"unreadable", io.MultiReader(strings.NewReader(good("a")+good("b")), iotest.ErrReader(errors.New("connection reset"))), batch.CreateOptions{}, "reading line 3: connection reset"},
		{"bad window", strings.NewReader(good("a")), batch.CreateOptions{Window: schemas.MaxBatchWindow + 1}, "window must be between 1 and 1000"},
		{"bad priority", strings.NewReader(good("a")), batch.CreateOptions{Priority: -1}, "priority must be between 0 and 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t)
			_, err := s.Create(ctx, "acme", tt.in, tt.o)
			if !errors.Is(err, batch.ErrInvalid) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Create = %v, want ErrInvalid saying %q", err, tt.msg)
			}
		})
	}
	t.Cleanup(func() {
		// Nothing of any refused batch is kept: no record, no line.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if recs, err := s.List(ctx, "acme"); err != nil || len(recs) != 0 {
			t.Errorf("List = %d records, %v; want none", len(recs), err)
		}
		st, err := topo.JS.Stream(ctx, topo.NS.BatchesStream())
		if err != nil {
			t.Fatal(err)
		}
		if info, err := st.Info(ctx); err != nil || info.State.Msgs != 0 {
			t.Errorf("batch stream holds %d lines (%v), want none", info.State.Msgs, err)
		}
	})
}

// TestCreateTenantsAndIDs: a tenant sees only its own batches; ids are
// not guessable into another tenant's; an invalid-only batch is completed
// at once.
func TestCreateTenantsAndIDs(t *testing.T) {
	t.Parallel()
	s, topo := newStore(t)
	ctx := ctxFor(t)
	a, err := s.Create(ctx, "acme", strings.NewReader(`{"custom_id":"1","task":"hanoi","params":{"disks":2},"k":1}`), batch.CreateOptions{Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, "beta", strings.NewReader("oops\n"), batch.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.State != schemas.BatchCompleted || b.CompletedAt == nil || b.Counts.Failed != 1 {
		t.Errorf("an all-invalid batch: %+v, want completed with 1 failed", b)
	}
	for _, tc := range []struct{ tenant, id string }{{"beta", a.ID}, {"acme", b.ID}, {"acme", "batch_nothere"}, {"acme", "../x"}} {
		if _, err := s.Get(ctx, tc.tenant, tc.id); !errors.Is(err, batch.ErrNotFound) {
			t.Errorf("Get(%s, %s) = %v, want ErrNotFound", tc.tenant, tc.id, err)
		}
		if err := s.Output(ctx, tc.tenant, tc.id, io.Discard); !errors.Is(err, batch.ErrNotFound) {
			t.Errorf("Output(%s, %s) = %v, want ErrNotFound", tc.tenant, tc.id, err)
		}
		if _, err := s.Cancel(ctx, tc.tenant, tc.id); !errors.Is(err, batch.ErrNotFound) {
			t.Errorf("Cancel(%s, %s) = %v, want ErrNotFound", tc.tenant, tc.id, err)
		}
	}
	list, err := s.List(ctx, "acme")
	if err != nil || len(list) != 1 || list[0].ID != a.ID {
		t.Errorf("List(acme) = %+v, %v; want only %s", list, err, a.ID)
	}
	// Cancelling a queued batch ends it at once: none of its jobs was fed.
	c, err := s.Cancel(ctx, "acme", a.ID)
	if err != nil || c.State != schemas.BatchCancelled || c.Counts.Cancelled != 1 {
		t.Errorf("Cancel = %+v, %v; want cancelled with 1 cancelled", c, err)
	}
	if _, err := s.Cancel(ctx, "acme", a.ID); err != nil {
		t.Errorf("cancelling again: %v", err)
	}
	if _, err := s.Cancel(ctx, "beta", b.ID); !errors.Is(err, batch.ErrFinished) {
		t.Errorf("cancelling a completed batch: %v, want ErrFinished", err)
	}
	out := output(t, ctx, s, "acme", a.ID, false)
	if len(out) != 1 || out[0].Error == nil || out[0].Error.Code != schemas.BatchErrBatchCancelled {
		t.Errorf("output of a cancelled batch: %+v", out)
	}
	if got, err := s.Wait(ctx, "acme", a.ID, nil); err != nil || got.State != schemas.BatchCancelled {
		t.Errorf("Wait = %+v, %v", got, err)
	}
	if n := stored(t, ctx, topo, "beta", b.ID); n != 1 {
		t.Errorf("beta's batch has %d lines stored, want 1", n)
	}
}

// putReport stores a report for tenant's job, ended in state.
func putReport(t *testing.T, ctx context.Context, topo *topology.Topology, tenant, job, state string) {
	t.Helper()
	data, err := os.ReadFile("../../schemas/testdata/job_report.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep schemas.JobReport
	if err := schemas.Decode(data, &rep); err != nil {
		t.Fatal(err)
	}
	rep.Tenant, rep.JobID, rep.State, rep.Solved = tenant, job, state, state == schemas.StateSolved
	if !rep.Solved {
		rep.Reason = "it " + state
	}
	enc, err := schemas.Encode(&rep)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Reports.Put(ctx, bus.JobKey(tenant, job), enc); err != nil {
		t.Fatal(err)
	}
}

// TestRunnerWindowAndCounts: a runner (no coordinator: the test writes
// the jobs' reports) registers exactly a window of jobs, in input order,
// feeds the next line only when a job has ended, and counts each
// report's outcome once; the output shows a failed and a cancelled job
// with their reports and errors.
func TestRunnerWindowAndCounts(t *testing.T) {
	t.Parallel()
	s, topo := newStore(t)
	ctx := ctxFor(t)
	in := `{"custom_id":"a","task":"hanoi","params":{"disks":2},"k":1}
{"custom_id":"b","task":"hanoi","params":{"disks":2},"k":1}
oops
{"custom_id":"c","task":"hanoi","params":{"disks":2},"k":1,"priority":7}
`
	rec, err := s.Create(ctx, "acme", strings.NewReader(in), batch.CreateOptions{Window: 2, Priority: 3})
	if err != nil {
		t.Fatal(err)
	}
	r, err := batch.NewRunner(topo, batch.RunnerConfig{
		Owner: "runner-test", ScanInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	job := func(line int64) string { return schemas.BatchJobID(rec.ID, line) }
	registered := func(line int64) bool {
		_, err := topo.Jobs.Get(ctx, bus.JobKey("acme", job(line)))
		return err == nil
	}
	waitFor := func(what string, cond func(schemas.BatchRecord) bool) schemas.BatchRecord {
		t.Helper()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var got schemas.BatchRecord
		_, err := s.Wait(wctx, "acme", rec.ID, func(r schemas.BatchRecord) {
			if cond(r) {
				got = r
				cancel()
			}
		})
		if got.ID == "" {
			t.Fatalf("%s: %v", what, err)
		}
		return got
	}
	cur := waitFor("two jobs fed", func(r schemas.BatchRecord) bool { return r.Counts.Submitted == 2 })
	if !registered(1) || !registered(2) || registered(4) || cur.Cursor != 2 {
		t.Fatalf("window 2: lines 1, 2 registered, 4 not, cursor 2; got %v %v %v, cursor %d", registered(1), registered(2), registered(4), cur.Cursor)
	}
	putReport(t, ctx, topo, "acme", job(2), schemas.StateFailed)
	cur = waitFor("line 4 fed", func(r schemas.BatchRecord) bool { return r.Counts.Submitted == 3 })
	if cur.Counts.Failed != 2 || !registered(4) || cur.Cursor != 4 {
		t.Fatalf("after line 2 failed: %+v", cur)
	}
	j4, _, err := jobs.Get(ctx, topo, "acme", job(4))
	if err != nil || j4.Spec.Priority != 7 || j4.Spec.BatchLine != 4 {
		t.Errorf("line 4's job: %+v, %v", j4.Spec, err)
	}
	putReport(t, ctx, topo, "acme", job(1), schemas.StateSolved)
	putReport(t, ctx, topo, "acme", job(1), schemas.StateSolved) // again: counted once
	putReport(t, ctx, topo, "acme", job(4), schemas.StateCancelled)
	end, err := s.Wait(ctx, "acme", rec.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (schemas.BatchCounts{Total: 4, Valid: 3, Invalid: 1, Submitted: 3, Completed: 1, Failed: 2, Cancelled: 1}); end.Counts != want || end.State != schemas.BatchCompleted {
		t.Errorf("ended %s with %+v, want completed with %+v", end.State, end.Counts, want)
	}
	codes := map[int64]string{}
	for _, o := range output(t, ctx, s, "acme", rec.ID, true) {
		codes[o.Line] = o.Error.Code
		if o.Line != 3 && (o.Response == nil || o.Response.JobID != o.JobID) {
			t.Errorf("line %d: a job's error line carries its report: %+v", o.Line, o)
		}
	}
	want := map[int64]string{2: schemas.BatchErrJobFailed, 3: schemas.BatchErrInvalidJSON, 4: schemas.BatchErrJobCancelled}
	if !maps.Equal(codes, want) {
		t.Errorf("error file codes %v, want %v", codes, want)
	}
}
