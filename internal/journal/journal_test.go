package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	tenant = "acme"
	job    = "j1"
)

// fleet is a fresh server with the topology in the default namespace.
type fleet struct {
	js jetstream.JetStream
	ns bus.Namespace
}

func newFleet(t *testing.T) fleet {
	t.Helper()
	js, topo := testkit.StartTopology(t)
	return fleet{js: js, ns: topo.NS}
}

func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (f fleet) open(t *testing.T, jobID string) (*journal.Journal, *journal.Resume) {
	t.Helper()
	j, res, err := journal.Open(opCtx(t), f.js, f.ns, tenant, jobID)
	if err != nil {
		t.Fatalf("Open %s: %v", jobID, err)
	}
	return j, res
}

// all reads the whole journal of jobID.
func (f fleet) all(t *testing.T, jobID string) []journal.Entry {
	t.Helper()
	var out []journal.Entry
	if err := journal.ReadAll(opCtx(t), f.js, f.ns, tenant, jobID, func(e journal.Entry) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatalf("ReadAll %s: %v", jobID, err)
	}
	return out
}

func takeover(jobID string, token, step int64) *schemas.JournalEntry {
	return &schemas.JournalEntry{
		Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: tenant, JobID: jobID,
		Type: schemas.EntryTakeover, Token: token, Owner: fmt.Sprintf("c%d", token), Step: step, At: time.Now().UTC(),
	}
}

func decision(jobID string, token, step int64) *schemas.JournalEntry {
	return &schemas.JournalEntry{
		Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: tenant, JobID: jobID,
		Type: schemas.EntryDecision, Token: token, Owner: fmt.Sprintf("c%d", token), Step: step,
		Epoch: token * schemas.EpochsPerLease, VoteKey: fmt.Sprintf("move-%d", step),
		Votes: 2, Lead: 2, Valid: 2, Counted: 2, Work: schemas.Delta{Figures: schemas.Figures{PromptTokens: 10 + step}}, At: time.Now().UTC(),
	}
}

func checkpoint(jobID string, token int64, seq uint64, step int64) *schemas.Checkpoint {
	return &schemas.Checkpoint{
		Header: schemas.NewHeader(schemas.KindCheckpoint), Tenant: tenant, JobID: jobID, Token: token,
		JournalSeq: seq, Step: step, State: json.RawMessage(fmt.Sprintf(`{"step":%d}`, step)),
		Trace: []byte{1, 2, 3}, Progress: schemas.Progress{Figures: schemas.Figures{Steps: step}}, At: time.Now().UTC(),
	}
}

func appendOK(t *testing.T, j *journal.Journal, e *schemas.JournalEntry) uint64 {
	t.Helper()
	seq, err := j.Append(opCtx(t), e)
	if err != nil {
		t.Fatalf("Append %s step %d token %d: %v", e.Type, e.Step, e.Token, err)
	}
	if seq != j.LastSeq() {
		t.Fatalf("Append returned %d but LastSeq is %d", seq, j.LastSeq())
	}
	return seq
}

// key identifies an entry for comparisons.
func key(e schemas.JournalEntry) string {
	return fmt.Sprintf("%s/%d/%d/%s", e.Type, e.Token, e.Step, e.VoteKey)
}

func keys(es []journal.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = key(e.JournalEntry)
	}
	return out
}

func wantEntries(t *testing.T, what string, got []journal.Entry, want []*schemas.JournalEntry, seqs []uint64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries %v, want %d", what, len(got), keys(got), len(want))
	}
	for i := range want {
		if key(got[i].JournalEntry) != key(*want[i]) || got[i].Seq != seqs[i] || !reflect.DeepEqual(got[i].Work, want[i].Work) {
			t.Errorf("%s: entry %d is %s at %d, want %s at %d", what, i, key(got[i].JournalEntry), got[i].Seq, key(*want[i]), seqs[i])
		}
	}
}

// TestAppendAndOpen: entries come back from Open and ReadAll in order with
// their sequences; another job's entries in the same stream are not mixed
// in; a reopened journal appends after the last entry.
func TestAppendAndOpen(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	j, res := f.open(t, job)
	if res.Checkpoint != nil || len(res.Entries) != 0 || j.LastSeq() != 0 {
		t.Fatalf("new journal: checkpoint %v, %d entries, last %d; want nothing", res.Checkpoint, len(res.Entries), j.LastSeq())
	}
	other, _ := f.open(t, "j2")

	want := []*schemas.JournalEntry{takeover(job, 1, 0), decision(job, 1, 0), decision(job, 1, 1), decision(job, 1, 2)}
	var seqs []uint64
	for i, e := range want {
		seqs = append(seqs, appendOK(t, j, e))
		appendOK(t, other, decision("j2", 1, int64(i))) // interleaved in the stream
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("sequences %v do not grow", seqs)
		}
	}
	wantEntries(t, "ReadAll", f.all(t, job), want, seqs)

	j2, res := f.open(t, job)
	if res.Checkpoint != nil {
		t.Errorf("checkpoint %+v, want none", res.Checkpoint)
	}
	wantEntries(t, "Open", res.Entries, want, seqs)
	if j2.LastSeq() != seqs[len(seqs)-1] {
		t.Errorf("reopened LastSeq %d, want %d", j2.LastSeq(), seqs[len(seqs)-1])
	}
	// The reopened journal appends after the last entry (it would be fenced
	// were it positioned anywhere else).
	next := decision(job, 1, 3)
	seqs = append(seqs, appendOK(t, j2, next))
	wantEntries(t, "ReadAll after reopen", f.all(t, job), append(want, next), seqs)
	if n := len(f.all(t, "j2")); n != len(want) {
		t.Errorf("other job has %d entries, want %d", n, len(want))
	}
}

// TestResumeFromCheckpoint: Open returns the last checkpoint and only the
// entries after the one it folds in.
func TestResumeFromCheckpoint(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	j, _ := f.open(t, job)
	var entries []*schemas.JournalEntry
	var seqs []uint64
	add := func(e *schemas.JournalEntry) {
		entries = append(entries, e)
		seqs = append(seqs, appendOK(t, j, e))
	}
	add(takeover(job, 1, 0))
	for s := range int64(4) {
		add(decision(job, 1, s))
	}
	if err := j.Checkpoint(opCtx(t), checkpoint(job, 1, seqs[2], 2)); err != nil {
		t.Fatal(err)
	}
	add(decision(job, 1, 4))
	if err := j.Checkpoint(opCtx(t), checkpoint(job, 1, seqs[3], 3)); err != nil { // the later one counts
		t.Fatal(err)
	}
	add(decision(job, 1, 5))

	_, res := f.open(t, job)
	if c := res.Checkpoint; c == nil || c.JournalSeq != seqs[3] || c.Step != 3 || c.Token != 1 || string(c.State) != `{"step":3}` {
		t.Fatalf("checkpoint %+v, want the one at %d (step 3)", c, seqs[3])
	}
	wantEntries(t, "Open", res.Entries, entries[4:], seqs[4:])

	// A checkpoint of the last entry leaves nothing to read.
	j2, _ := f.open(t, job)
	if err := j2.Checkpoint(opCtx(t), checkpoint(job, 1, seqs[len(seqs)-1], 6)); err != nil {
		t.Fatal(err)
	}
	j3, res := f.open(t, job)
	if res.Checkpoint == nil || res.Checkpoint.Step != 6 || len(res.Entries) != 0 {
		t.Errorf("after a checkpoint of the last entry: checkpoint %+v, entries %v; want step 6, none", res.Checkpoint, keys(res.Entries))
	}
	if j3.LastSeq() != seqs[len(seqs)-1] {
		t.Errorf("LastSeq %d, want %d", j3.LastSeq(), seqs[len(seqs)-1])
	}
	// ReadAll still has everything.
	wantEntries(t, "ReadAll", f.all(t, job), entries, seqs)
}

// TestTwoWritersOneWins: two writers positioned after the same entry
// append at once: exactly one entry lands, the other writer gets ErrFenced.
func TestTwoWritersOneWins(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	j0, _ := f.open(t, job)
	appendOK(t, j0, takeover(job, 1, 0))
	for round := range 5 {
		a, _ := f.open(t, job)
		b, _ := f.open(t, job)
		before := len(f.all(t, job))
		ea, eb := decision(job, 1, int64(round)), decision(job, 2, int64(round))
		var wg sync.WaitGroup
		var errA, errB error
		start := make(chan struct{})
		wg.Go(func() { <-start; _, errA = a.Append(opCtx(t), ea) })
		wg.Go(func() { <-start; _, errB = b.Append(opCtx(t), eb) })
		close(start)
		wg.Wait()
		var winner *schemas.JournalEntry
		switch {
		case errA == nil && errors.Is(errB, journal.ErrFenced):
			winner = ea
		case errB == nil && errors.Is(errA, journal.ErrFenced):
			winner = eb
		default:
			t.Fatalf("round %d: Append errors %v and %v, want exactly one ErrFenced", round, errA, errB)
		}
		got := f.all(t, job)
		if len(got) != before+1 || key(got[len(got)-1].JournalEntry) != key(*winner) {
			t.Fatalf("round %d: journal %v, want one new entry %s", round, keys(got), key(*winner))
		}
	}
}

// TestTakeoverFencesOldWriter: once a new owner has appended its takeover
// entry, the old owner's appends are refused and not written, and so are
// its checkpoints once the new owner has checkpointed; the new owner goes
// on undisturbed.
func TestTakeoverFencesOldWriter(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	old, _ := f.open(t, job)
	appendOK(t, old, takeover(job, 1, 0))
	appendOK(t, old, decision(job, 1, 0))
	if err := old.Checkpoint(opCtx(t), checkpoint(job, 1, old.LastSeq(), 1)); err != nil {
		t.Fatal(err)
	}

	nw, res := f.open(t, job)
	if res.Checkpoint == nil || res.Checkpoint.Step != 1 {
		t.Fatalf("new owner's resume point %+v, want the old owner's checkpoint", res.Checkpoint)
	}
	tk := appendOK(t, nw, takeover(job, 2, 1))

	if _, err := old.Append(opCtx(t), decision(job, 1, 1)); !errors.Is(err, journal.ErrFenced) {
		t.Errorf("old owner's Append after the takeover = %v, want ErrFenced", err)
	}
	if old.LastSeq() >= tk {
		t.Errorf("fenced writer's LastSeq moved to %d", old.LastSeq())
	}
	if err := nw.Checkpoint(opCtx(t), checkpoint(job, 2, tk, 1)); err != nil {
		t.Fatal(err)
	}
	if err := old.Checkpoint(opCtx(t), checkpoint(job, 1, old.LastSeq(), 2)); !errors.Is(err, journal.ErrFenced) {
		t.Errorf("old owner's Checkpoint after the new owner's = %v, want ErrFenced", err)
	}

	d := decision(job, 2, 1)
	appendOK(t, nw, d)
	got := f.all(t, job)
	want := []string{key(*takeover(job, 1, 0)), key(*decision(job, 1, 0)), key(*takeover(job, 2, 1)), key(*d)}
	if fmt.Sprint(keys(got)) != fmt.Sprint(want) {
		t.Errorf("journal %v, want %v", keys(got), want)
	}
	_, res = f.open(t, job)
	if res.Checkpoint == nil || res.Checkpoint.Token != 2 || len(res.Entries) != 1 || key(res.Entries[0].JournalEntry) != key(*d) {
		t.Errorf("resume point: checkpoint %+v, entries %v; want the new owner's, then its decision", res.Checkpoint, keys(res.Entries))
	}
}

// TestZombieCheckpointAfterTakeover: an old owner whose checkpoint comes
// after the new owner's takeover entry (but before the new owner's first
// checkpoint) must be refused, not fence the new owner's checkpoints out.
func TestZombieCheckpointAfterTakeover(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	old, _ := f.open(t, job)
	appendOK(t, old, takeover(job, 1, 0))
	appendOK(t, old, decision(job, 1, 0))
	nw, _ := f.open(t, job)
	tk := appendOK(t, nw, takeover(job, 2, 1))
	if err := old.Checkpoint(opCtx(t), checkpoint(job, 1, old.LastSeq(), 1)); !errors.Is(err, journal.ErrFenced) {
		t.Errorf("old owner's Checkpoint after the takeover = %v, want ErrFenced", err)
	}
	if err := nw.Checkpoint(opCtx(t), checkpoint(job, 2, tk, 1)); err != nil {
		t.Errorf("new owner's Checkpoint = %v, want nil", err)
	}
}

// TestCheckpointFencing: checkpoints are fenced on the entries, like
// appends: two handles at the same position may both checkpoint, but once
// one appends (a new owner's takeover), the other's checkpoint is refused
// and the stored checkpoint is the appender's.
func TestCheckpointFencing(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	j0, _ := f.open(t, job)
	seq := appendOK(t, j0, takeover(job, 1, 0))
	a, _ := f.open(t, job)
	b, _ := f.open(t, job)
	if err := b.Checkpoint(opCtx(t), checkpoint(job, 1, seq, 1)); err != nil {
		t.Fatalf("checkpoint at the last entry: %v", err)
	}
	seq2 := appendOK(t, a, takeover(job, 2, 1))
	if err := b.Checkpoint(opCtx(t), checkpoint(job, 1, seq2, 2)); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("checkpoint behind a newer entry: %v, want ErrFenced", err)
	}
	if err := a.Checkpoint(opCtx(t), checkpoint(job, 2, seq2, 3)); err != nil {
		t.Fatalf("the appender's checkpoint: %v", err)
	}
	_, res := f.open(t, job)
	if res.Checkpoint == nil || res.Checkpoint.Step != 3 || res.Checkpoint.Token != 2 {
		t.Errorf("stored checkpoint %+v, want the appender's (token 2, step 3)", res.Checkpoint)
	}
	s, err := f.js.Stream(opCtx(t), f.ns.JournalStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(opCtx(t), jetstream.WithSubjectFilter(f.ns.CheckpointSubject(tenant, job)))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[f.ns.CheckpointSubject(tenant, job)]; n != 2 {
		t.Errorf("%d checkpoints stored, want 2", n)
	}
}

// TestAppendLandedReplyLost: an append that landed though its writer never
// saw the acknowledgement (simulated by a second handle appending the very
// same entry first) is recognised as written: the writer gets its
// sequence, and the entry is in the journal once. The same holds for a
// checkpoint.
func TestAppendLandedReplyLost(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	j0, _ := f.open(t, job)
	appendOK(t, j0, takeover(job, 1, 0))

	writer, _ := f.open(t, job)
	landed, _ := f.open(t, job)
	e := decision(job, 1, 0)
	seq := appendOK(t, landed, e)
	got, err := writer.Append(opCtx(t), e)
	if err != nil || got != seq {
		t.Fatalf("Append of an entry that already landed = %d, %v; want %d, nil", got, err, seq)
	}
	if writer.LastSeq() != seq {
		t.Errorf("LastSeq %d, want %d", writer.LastSeq(), seq)
	}
	if n := len(f.all(t, job)); n != 2 {
		t.Errorf("journal holds %d entries, want 2 (the entry once)", n)
	}
	c := checkpoint(job, 1, seq, 1)
	if err := landed.Checkpoint(opCtx(t), c); err != nil {
		t.Fatal(err)
	}
	if err := writer.Checkpoint(opCtx(t), c); err != nil {
		t.Errorf("Checkpoint that already landed = %v, want nil", err)
	}
	// The writer goes on from there.
	appendOK(t, writer, decision(job, 1, 1))
	if err := writer.Checkpoint(opCtx(t), checkpoint(job, 1, writer.LastSeq(), 2)); err != nil {
		t.Errorf("next Checkpoint: %v", err)
	}
}

// TestReadAllOrder: ReadAll passes every entry, in order, across several
// fetches; Open reads a long tail after a checkpoint the same way; fn's
// error stops ReadAll and is returned; an empty journal reads as nothing.
func TestReadAllOrder(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	if got := f.all(t, job); len(got) != 0 {
		t.Fatalf("empty journal read %d entries", len(got))
	}
	j, _ := f.open(t, job)
	const n = 600 // more than one fetch batch
	want := []*schemas.JournalEntry{takeover(job, 1, 0)}
	seqs := []uint64{appendOK(t, j, want[0])}
	for s := range int64(n) {
		e := decision(job, 1, s)
		want = append(want, e)
		seqs = append(seqs, appendOK(t, j, e))
		if s == 10 {
			if err := j.Checkpoint(opCtx(t), checkpoint(job, 1, seqs[len(seqs)-1], s+1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantEntries(t, "ReadAll", f.all(t, job), want, seqs)
	_, res := f.open(t, job)
	wantEntries(t, "Open after checkpoint", res.Entries, want[12:], seqs[12:])

	stop := errors.New("stop here")
	calls := 0
	err := journal.ReadAll(opCtx(t), f.js, f.ns, tenant, job, func(journal.Entry) error {
		calls++
		if calls == 5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 5 {
		t.Errorf("ReadAll with fn failing at the 5th entry = %v after %d calls, want that error after 5", err, calls)
	}
}

// TestCorruptJournal: an entry or checkpoint this build cannot read makes
// Open fail with ErrCorrupt rather than resume from a guess.
func TestCorruptJournal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		subject func(bus.Namespace) string
	}{
		{"entry", func(ns bus.Namespace) string { return ns.JournalSubject(tenant, job) }},
		{"checkpoint", func(ns bus.Namespace) string { return ns.CheckpointSubject(tenant, job) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t)
			j, _ := f.open(t, job)
			appendOK(t, j, takeover(job, 1, 0))
			if _, err := f.js.Publish(opCtx(t), tc.subject(f.ns), []byte(`{"kind":"nonsense"}`)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := journal.Open(opCtx(t), f.js, f.ns, tenant, job); !errors.Is(err, journal.ErrCorrupt) {
				t.Errorf("Open = %v, want ErrCorrupt", err)
			}
		})
	}
}
