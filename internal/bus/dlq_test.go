package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// dlqFleet connects to a fresh server with the topology in place.
func dlqFleet(t *testing.T) (jetstream.JetStream, *bus.Topology) {
	t.Helper()
	js, topo := testkit.StartTopology(t)
	return js, topo
}

func dlqCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func deadLetter(stream string, seq uint64, subject, reason string) *schemas.DeadLetter {
	return &schemas.DeadLetter{
		Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: stream, Seq: seq, Subject: subject,
		Consumer: bus.ConsumerVoters, Reason: reason, Deliveries: 10,
		Data: []byte(fmt.Sprintf(`{"payload":%d}`, seq)), At: time.Now().UTC().Truncate(time.Millisecond),
	}
}

func listDL(t *testing.T, js jetstream.JetStream, ns bus.Namespace, tenant, job string, max int) []schemas.StoredDeadLetter {
	t.Helper()
	dls, err := bus.ListDeadLetters(dlqCtx(t), js, ns, tenant, job, max)
	if err != nil {
		t.Fatalf("ListDeadLetters(%q, %q, %d): %v", tenant, job, max, err)
	}
	return dls
}

// TestDeadLetters: dead letters are stored under the job their subject
// names (once per original message), and listed oldest first, filtered by
// tenant and job and bounded by max.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	js, topo := dlqFleet(t)
	ns := topo.NS
	if got := listDL(t, js, ns, "", "", 100); len(got) != 0 {
		t.Fatalf("empty DLQ lists %d dead letters", len(got))
	}

	samples := ns.SamplesStream()
	dls := []*schemas.DeadLetter{
		deadLetter(samples, 11, ns.SampleSubject("acme", "j1"), "max_deliveries"),
		deadLetter(samples, 12, ns.SampleSubject("acme", "j2"), "bad request"),
		deadLetter(samples, 13, ns.SampleSubject("beta", "j1"), "max_deliveries"),
		deadLetter(ns.JobsStream(), 14, "elsewhere.subject", "max_deliveries"), // names no job
	}
	for _, dl := range dls {
		if err := bus.PublishDeadLetter(dlqCtx(t), js, ns, dl); err != nil {
			t.Fatal(err)
		}
	}
	// The same original reported again (another coordinator saw the same
	// advisory) is stored once; the same sequence of another stream is
	// another message.
	if err := bus.PublishDeadLetter(dlqCtx(t), js, ns, deadLetter(samples, 11, ns.SampleSubject("acme", "j1"), "again")); err != nil {
		t.Fatal(err)
	}
	other := deadLetter(ns.ResultsStream(), 11, ns.ResultSubject("acme", "j1", 2), "max_deliveries")
	if err := bus.PublishDeadLetter(dlqCtx(t), js, ns, other); err != nil {
		t.Fatal(err)
	}
	dls = append(dls, other)

	all := listDL(t, js, ns, "", "", 100)
	if len(all) != len(dls) {
		t.Fatalf("DLQ lists %d dead letters, want %d", len(all), len(dls))
	}
	for i, want := range dls {
		got := all[i]
		if got.Stream != want.Stream || got.Seq != want.Seq || got.Subject != want.Subject || got.Reason != want.Reason ||
			string(got.Data) != string(want.Data) || got.Deliveries != want.Deliveries || !got.At.Equal(want.At) || got.Consumer != want.Consumer {
			t.Errorf("dead letter %d = %+v, want %+v", i, got.DeadLetter, *want)
		}
		if i > 0 && got.DLQSeq <= all[i-1].DLQSeq {
			t.Errorf("dead letter %d has DLQ sequence %d after %d: not oldest first", i, got.DLQSeq, all[i-1].DLQSeq)
		}
	}

	seqs := func(ds []schemas.StoredDeadLetter) string {
		var s []string
		for _, d := range ds {
			s = append(s, fmt.Sprint(d.Seq))
		}
		return strings.Join(s, ",")
	}
	tests := []struct {
		tenant, job string
		max         int
		want        string // original sequences
	}{
		{"", "", 100, "11,12,13,14,11"},
		{"", "", 2, "11,12"},
		{"acme", "", 100, "11,12,11"},
		{"", "j1", 100, "11,13,11"},
		{"acme", "j1", 100, "11,11"},
		{"beta", "j2", 100, ""},
		{"nobody", "", 100, ""},
		{"unknown", "unknown", 100, "14"},
		{"", "", 0, ""},
	}
	for _, tt := range tests {
		if got := seqs(listDL(t, js, ns, tt.tenant, tt.job, tt.max)); got != tt.want {
			t.Errorf("ListDeadLetters(%q, %q, %d) = [%s], want [%s]", tt.tenant, tt.job, tt.max, got, tt.want)
		}
	}

	// An invalid dead letter is refused and not stored.
	bad := deadLetter(samples, 99, ns.SampleSubject("acme", "j1"), "")
	if err := bus.PublishDeadLetter(dlqCtx(t), js, ns, bad); !errors.Is(err, schemas.ErrInvalid) {
		t.Errorf("PublishDeadLetter without a reason = %v, want ErrInvalid", err)
	}
	if n := len(listDL(t, js, ns, "", "", 100)); n != len(dls) {
		t.Errorf("DLQ holds %d dead letters after a refused one, want %d", n, len(dls))
	}
}

// TestReplayDeadLetter: a replay publishes the original payload to its
// original subject (even inside the stream's duplicate window of the
// original) and removes the dead letter; it cannot be replayed twice, and
// an unknown sequence is ErrNoDeadLetter.
func TestReplayDeadLetter(t *testing.T) {
	t.Parallel()
	js, topo := dlqFleet(t)
	ns := topo.NS
	subject := ns.SampleSubject("acme", "j1")
	payload := []byte(`{"original":"request"}`)
	msg := &nats.Msg{Subject: subject, Data: payload, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, "acme/j1/0/0/0/0")
	ack, err := js.PublishMsg(dlqCtx(t), msg)
	if err != nil {
		t.Fatal(err)
	}
	dl := deadLetter(ack.Stream, ack.Sequence, subject, "max_deliveries")
	dl.Data = payload
	if err := bus.PublishDeadLetter(dlqCtx(t), js, ns, dl); err != nil {
		t.Fatal(err)
	}
	keep := deadLetter(ack.Stream, ack.Sequence+100, ns.SampleSubject("acme", "j2"), "max_deliveries")
	if err := bus.PublishDeadLetter(dlqCtx(t), js, ns, keep); err != nil {
		t.Fatal(err)
	}
	stored := listDL(t, js, ns, "acme", "j1", 10)
	if len(stored) != 1 {
		t.Fatalf("DLQ lists %d dead letters of acme/j1, want 1", len(stored))
	}

	got, err := bus.ReplayDeadLetter(dlqCtx(t), js, ns, stored[0].DLQSeq)
	if err != nil {
		t.Fatal(err)
	}
	if got.DLQSeq != stored[0].DLQSeq || got.Subject != subject || string(got.Data) != string(payload) {
		t.Errorf("ReplayDeadLetter = %+v, want the dead letter", got)
	}
	s, err := js.Stream(dlqCtx(t), ns.SamplesStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(dlqCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("samples stream holds %d messages after the replay, want 2 (the original and the replay)", info.State.Msgs)
	}
	last, err := s.GetLastMsgForSubject(dlqCtx(t), subject)
	if err != nil {
		t.Fatal(err)
	}
	if string(last.Data) != string(payload) || last.Sequence <= ack.Sequence {
		t.Errorf("last message on %s is %q at %d, want the replayed payload after %d", subject, last.Data, last.Sequence, ack.Sequence)
	}

	if left := listDL(t, js, ns, "", "", 10); len(left) != 1 || left[0].Seq != keep.Seq {
		t.Errorf("DLQ after the replay holds %+v, want only the other dead letter", left)
	}
	for _, seq := range []uint64{stored[0].DLQSeq, 99} {
		if _, err := bus.ReplayDeadLetter(dlqCtx(t), js, ns, seq); !errors.Is(err, bus.ErrNoDeadLetter) {
			t.Errorf("ReplayDeadLetter(%d) = %v, want ErrNoDeadLetter", seq, err)
		}
	}
	info, err = s.Info(dlqCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("samples stream holds %d messages after refused replays, want 2", info.State.Msgs)
	}
}
