package topology_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestDuplicateWindowsDeclared: every stream of the table declares its
// duplicate window (none is left to the server's default), the work queues
// and the journal take the config's, marked as sized, with the window an
// older release gave them beside; the others are fixed.
func TestDuplicateWindowsDeclared(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		cfg           topology.Config
		work, journal time.Duration
	}{
		{"defaults", topology.Config{}, 30 * time.Second, time.Minute},
		{"set", topology.Config{WorkDuplicates: 45 * time.Second, JournalDuplicates: 5 * time.Minute}, 45 * time.Second, 5 * time.Minute},
		{"another namespace", topology.Config{Namespace: "team-a", WorkDuplicates: time.Hour}, time.Hour, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := tc.cfg.Namespace
			type want struct {
				window, old time.Duration
			}
			wants := map[string]want{
				ns.JobsStream():       {10 * time.Minute, 0},
				ns.SamplesStream():    {tc.work, 2 * time.Minute},
				ns.ResultsStream():    {tc.work, 2 * time.Minute},
				ns.JournalStream():    {tc.journal, 10 * time.Minute},
				ns.BatchesStream():    {2 * time.Minute, 0},
				ns.DLQStream():        {10 * time.Minute, 0},
				ns.WebhooksStream():   {10 * time.Minute, 0},
				ns.JudgeStream():      {10 * time.Minute, 0},
				ns.ArbitrateStream():  {10 * time.Minute, 0},
				ns.JudgeAuditStream(): {10 * time.Minute, 0},
			}
			seen := 0
			for _, d := range topology.Table(ns, tc.cfg, topology.JudgeConfig{Namespace: ns}) {
				if d.Kind != topology.Stream {
					continue
				}
				w, ok := wants[d.Name()]
				if !ok {
					t.Errorf("stream %s: no window expected of it in this test; add it", d.Name())
					continue
				}
				seen++
				if d.Stream.Duplicates != w.window || d.OldDuplicates != w.old {
					t.Errorf("stream %s: window %v (older releases' %v), want %v (%v)", d.Name(), d.Stream.Duplicates, d.OldDuplicates, w.window, w.old)
				}
				if _, marked := d.Stream.Metadata[topology.DuplicatesMark]; marked != (w.old != 0) {
					t.Errorf("stream %s: marked %v as sized, want %v", d.Name(), marked, w.old != 0)
				}
			}
			if seen != len(wants) {
				t.Errorf("the table declares %d of the %d streams", seen, len(wants))
			}
		})
	}
}

// TestCheckDuplicates: a work window must outlast a voter's retries of a
// result (10s) with room to spare, and no window may pass the work
// queues' age; zero is the default. Ensure refuses what CheckDuplicates
// refuses.
func TestCheckDuplicates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		work, journal time.Duration
		ok            bool
	}{
		{0, 0, true},
		{topology.MinWorkDuplicates, topology.MinJournalDuplicates, true},
		{topology.MaxDuplicates, topology.MaxDuplicates, true},
		{10 * time.Second, 0, false},
		{topology.MinWorkDuplicates - 1, 0, false},
		{-time.Second, 0, false},
		{0, 500 * time.Millisecond, false},
		{0, topology.MaxDuplicates + 1, false},
		{25 * time.Hour, 0, false},
	} {
		err := topology.CheckDuplicates(tc.work, tc.journal)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, topology.ErrDuplicates) {
			t.Errorf("CheckDuplicates(%v, %v) = %v, want ok %v", tc.work, tc.journal, err, tc.ok)
		}
	}
	if _, err := topology.Ensure(opCtx(t), jetStream(t), topology.Config{WorkDuplicates: 5 * time.Second}); !errors.Is(err, topology.ErrDuplicates) {
		t.Errorf("Ensure with a 5s work window: %v, want ErrDuplicates", err)
	}
}

// olderStream creates stream d as a release before the windows were
// sized made it: its window the old one, no mark, and (to check that
// Ensure's updates build on each other) no size limit.
func olderStream(t *testing.T, js jetstream.JetStream, d topology.Decl, window time.Duration) {
	t.Helper()
	sc := d.Stream
	sc.Metadata, sc.MaxBytes, sc.Duplicates = nil, 0, window
	if _, err := js.CreateStream(opCtx(t), sc); err != nil {
		t.Fatal(err)
	}
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(opCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config
}

// TestEnsureWindowDrift: Ensure gives a stream an older release made with
// its windows the config's and marks it (its limits set on the way stay);
// a window anyone else chose stays whatever a role's config says, with a
// notice; SetDuplicates (maker topology create given a window) sets the
// windows given, and only those.
func TestEnsureWindowDrift(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ns := bus.DefaultNamespace
	decls := map[string]topology.Decl{}
	for _, d := range topology.Table(ns, topology.Config{}, topology.JudgeConfig{}) {
		decls[d.Name()] = d
	}
	olderStream(t, js, decls[ns.SamplesStream()], 2*time.Minute)
	olderStream(t, js, decls[ns.ResultsStream()], 2*time.Minute)
	// An operator's window on an unmarked journal: not an older default.
	olderStream(t, js, decls[ns.JournalStream()], 7*time.Minute)

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ensure := func(cfg topology.Config) {
		t.Helper()
		cfg.Logger = log
		if _, err := topology.Ensure(opCtx(t), js, cfg); err != nil {
			t.Fatal(err)
		}
	}
	check := func(stage string, want map[string]time.Duration, marked map[string]bool) {
		t.Helper()
		for name, w := range want {
			sc := streamConfig(t, js, name)
			_, m := sc.Metadata[topology.DuplicatesMark]
			if sc.Duplicates != w || m != marked[name] {
				t.Errorf("%s: %s window %v, marked %v; want %v, %v", stage, name, sc.Duplicates, m, w, marked[name])
			}
		}
	}
	all := func(v bool) map[string]bool {
		return map[string]bool{ns.SamplesStream(): v, ns.ResultsStream(): v, ns.JournalStream(): v}
	}

	ensure(topology.Config{})
	check("an older release's windows", map[string]time.Duration{
		ns.SamplesStream(): 30 * time.Second, ns.ResultsStream(): 30 * time.Second, ns.JournalStream(): 7 * time.Minute,
	}, map[string]bool{ns.SamplesStream(): true, ns.ResultsStream(): true})
	if sc := streamConfig(t, js, ns.ResultsStream()); sc.MaxBytes != decls[ns.ResultsStream()].Stream.MaxBytes {
		t.Errorf("results: max bytes %d after the window was set, want the limit set before it, %d", sc.MaxBytes, decls[ns.ResultsStream()].Stream.MaxBytes)
	}
	if !strings.Contains(logs.String(), "stream keeps its duplicate window") || !strings.Contains(logs.String(), "stream="+ns.JournalStream()) {
		t.Errorf("no notice that the journal keeps its window:\n%s", logs.String())
	}

	// A role with other windows changes no window that is sized.
	ensure(topology.Config{WorkDuplicates: 20 * time.Second, JournalDuplicates: 3 * time.Minute})
	check("another role's windows", map[string]time.Duration{
		ns.SamplesStream(): 30 * time.Second, ns.ResultsStream(): 30 * time.Second, ns.JournalStream(): 7 * time.Minute,
	}, map[string]bool{ns.SamplesStream(): true, ns.ResultsStream(): true})

	// The operator sets the journal's window; the work queues keep theirs.
	ensure(topology.Config{JournalDuplicates: 2 * time.Minute, SetDuplicates: true})
	check("the journal's window set", map[string]time.Duration{
		ns.SamplesStream(): 30 * time.Second, ns.ResultsStream(): 30 * time.Second, ns.JournalStream(): 2 * time.Minute,
	}, all(true))
	// Even the older releases' window, once set by the operator, stays.
	ensure(topology.Config{WorkDuplicates: 2 * time.Minute, SetDuplicates: true})
	ensure(topology.Config{})
	check("the operator's windows", map[string]time.Duration{
		ns.SamplesStream(): 2 * time.Minute, ns.ResultsStream(): 2 * time.Minute, ns.JournalStream(): 2 * time.Minute,
	}, all(true))
}

// TestJournalAppendOncePastWindow: the guarantee the journal's short
// window relies on. An append whose reply was lost and that is retried
// after the window forgot its id (the server no longer drops it as a
// duplicate) is still written once: the fence refuses it, and the writer
// recognises its own entry by its id. Another entry from a writer that
// missed it is fenced. A checkpoint retried so is stored again (its fence
// is the entries' subject), and a resume reads the same one.
func TestJournalAppendOncePastWindow(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ctx := opCtx(t)
	topo, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage, JournalDuplicates: topology.MinJournalDuplicates})
	if err != nil {
		t.Fatal(err)
	}
	ns := topo.NS
	const tenant, job = "acme", "j1"
	open := func() *journal.Journal {
		t.Helper()
		j, _, err := journal.Open(ctx, js, ns, tenant, job)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	entry := func(typ string, step int64) *schemas.JournalEntry {
		e := &schemas.JournalEntry{Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: tenant, JobID: job,
			Type: typ, Token: 1, Owner: "c1", Step: step, At: time.Now().UTC()}
		if typ == schemas.EntryDecision {
			e.Epoch, e.VoteKey, e.Votes, e.Lead, e.Valid, e.Counted = schemas.EpochsPerLease, fmt.Sprint("move-", step), 2, 2, 2, 2
		}
		return e
	}
	first := open()
	if _, err := first.Append(ctx, entry(schemas.EntryTakeover, 0)); err != nil {
		t.Fatal(err)
	}
	// writer is the owner whose reply was lost; landed, the same owner's
	// append that the server stored.
	writer, landed, stale := open(), open(), open()
	e := entry(schemas.EntryDecision, 0)
	seq, err := landed.Append(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, ns.JournalStream())
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.GetLastMsgForSubject(ctx, ns.JournalSubject(tenant, job))
	if err != nil {
		t.Fatal(err)
	}
	id := last.Header.Get(jetstream.MsgIDHeader)
	waitForgotten(t, js, ns.JournalSubject(tenant, job), id, seq-1)

	got, err := writer.Append(ctx, e)
	if err != nil || got != seq {
		t.Fatalf("append retried past the window = %d, %v; want %d, nil (its own entry, recognised)", got, err, seq)
	}
	var n int
	if err := journal.ReadAll(ctx, js, ns, tenant, job, func(journal.Entry) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("the journal holds %d entries, want 2: the takeover and the decision once", n)
	}
	if _, err := stale.Append(ctx, entry(schemas.EntryDecision, 1)); !errors.Is(err, journal.ErrFenced) {
		t.Errorf("another entry after one the writer missed: %v, want ErrFenced", err)
	}

	c := &schemas.Checkpoint{Header: schemas.NewHeader(schemas.KindCheckpoint), Tenant: tenant, JobID: job, Token: 1,
		JournalSeq: seq, Step: 1, State: []byte(`{"step":1}`), Trace: []byte{1}, At: time.Now().UTC()}
	if err := writer.Checkpoint(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := writer.Checkpoint(ctx, c); err != nil {
		t.Errorf("a checkpoint written again: %v", err)
	}
	if _, res, err := journal.Open(ctx, js, ns, tenant, job); err != nil || res.Checkpoint == nil || res.Checkpoint.JournalSeq != seq || len(res.Entries) != 0 {
		t.Errorf("resume after the checkpoint: %+v, %v; want the checkpoint at %d and no entry after it", res, err, seq)
	}
}

// waitForgotten waits until the server no longer holds message id id in
// subject's stream's duplicate window. The probe cannot store anything:
// it expects a last sequence the subject is past, so the server answers
// "duplicate" while it holds the id and refuses it after.
func waitForgotten(t *testing.T, js jetstream.JetStream, subject, id string, stale uint64) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool {
		msg := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: []byte(`{}`)}
		msg.Header.Set(jetstream.MsgIDHeader, id)
		ack, err := js.PublishMsg(opCtx(t), msg, jetstream.WithExpectLastSequencePerSubject(stale))
		var apiErr *jetstream.APIError
		switch {
		case err == nil && ack.Duplicate:
			return false
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
			return true
		}
		t.Fatalf("probe of id %s: ack %+v, %v; want a duplicate or a wrong last sequence", id, ack, err)
		return false
	}, "the journal's window still holds %s", id)
}
