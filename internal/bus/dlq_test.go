package bus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// dlqFleet connects to a fresh server with the topology in place.
func dlqFleet(t *testing.T) (jetstream.JetStream, *topology.Topology) {
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

// TestCheckReplay (issue 19, item 1): a dead letter replays only as what
// dead letters come from, a sample request of the job its own DLQ subject
// names, from the samples stream; whatever else its body names is refused.
func TestCheckReplay(t *testing.T) {
	t.Parallel()
	ns := bus.DefaultNamespace
	other := bus.Namespace("other")
	request, err := os.ReadFile("../../schemas/testdata/sample_request.json") // a request of acme/hanoi-10-k3
	if err != nil {
		t.Fatal(err)
	}
	const tenant, job = "acme", "hanoi-10-k3"
	home := ns.DLQSubject(tenant, job)
	samples := ns.SamplesStream()
	sample := ns.SampleSubject(tenant, job)
	for _, tc := range []struct {
		name, dlq, stream, subject string
		data                       []byte
		truncated                  bool
		ok                         bool
	}{
		{name: "its job's sample request", dlq: home, stream: samples, subject: sample, data: request, ok: true},
		{name: "an unreadable request of its job", dlq: home, stream: samples, subject: sample, data: []byte("\xff{garbage"), ok: true},
		{name: "a reference to its job's request", dlq: home, stream: samples, subject: sample, data: request[:10], truncated: true, ok: true},
		{name: "an API key", dlq: home, stream: samples, subject: "$KV.maker_apikeys." + strings.Repeat("ab", 32), data: request},
		{name: "an API key, stored where it would be", dlq: ns.DLQSubject("unknown", "unknown"), stream: samples, subject: "$KV.maker_apikeys.x", data: request},
		{name: "a job record", dlq: home, stream: samples, subject: "$KV.maker_jobs.acme.hanoi-10-k3", data: request},
		{name: "the JetStream API", dlq: home, stream: samples, subject: "$JS.API.STREAM.DELETE.MAKER_JOBS", data: request},
		{name: "an inbox", dlq: home, stream: samples, subject: "_INBOX.admin.x", data: request},
		{name: "another tenant's request", dlq: home, stream: samples, subject: ns.SampleSubject("beta", job), data: request},
		{name: "another job's request", dlq: home, stream: samples, subject: ns.SampleSubject(tenant, "j2"), data: request},
		{name: "another namespace's request", dlq: home, stream: samples, subject: other.SampleSubject(tenant, job), data: request},
		{name: "stored in another namespace", dlq: other.DLQSubject(tenant, job), stream: other.SamplesStream(), subject: other.SampleSubject(tenant, job), data: request},
		{name: "below a sample subject", dlq: home, stream: samples, subject: sample + ".x", data: request},
		{name: "a job submission", dlq: home, stream: samples, subject: ns.JobSubject(tenant), data: request},
		{name: "a result", dlq: home, stream: samples, subject: ns.ResultSubject(tenant, job, 1), data: request},
		{name: "a journal entry", dlq: home, stream: samples, subject: ns.JournalSubject(tenant, job), data: request},
		{name: "a step-decided notice", dlq: home, stream: samples, subject: ns.DecidedSubject(tenant, job), data: request},
		{name: "a batch line", dlq: home, stream: samples, subject: ns.BatchSubject(tenant, "b1"), data: request},
		{name: "a control", dlq: home, stream: samples, subject: "maker.v1.control.acme.hanoi-10-k3", data: request},
		{name: "a decision", dlq: home, stream: samples, subject: "maker.v1.decide.acme.hanoi-10-k3", data: request},
		{name: "a judge request", dlq: home, stream: samples, subject: "maker.v1.judge.acme", data: request},
		{name: "a judge approval", dlq: home, stream: samples, subject: "maker.v1.judge_approve.approver", data: request},
		{name: "another stream", dlq: home, stream: ns.JobsStream(), subject: sample, data: request},
		{name: "a reference into the API keys", dlq: home, stream: "KV_maker_apikeys", subject: sample, data: request[:10], truncated: true},
		{name: "not a DLQ subject", dlq: "maker.v1.dlq.acme", stream: samples, subject: sample, data: request},
		{name: "a DLQ subject of no job", dlq: "maker.v1.dlq.acme.a.b", stream: samples, subject: sample, data: request},
		{name: "no payload", dlq: home, stream: samples, subject: sample},
		{name: "a request of another job", dlq: ns.DLQSubject(tenant, "j2"), stream: samples, subject: ns.SampleSubject(tenant, "j2"), data: request},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dl := deadLetter(tc.stream, 7, tc.subject, "unreadable sample request")
			dl.Data, dl.Truncated = tc.data, tc.truncated
			err := ns.CheckReplay(tc.dlq, dl)
			if tc.ok && err != nil {
				t.Errorf("CheckReplay = %v, want it allowed", err)
			}
			if !tc.ok && !errors.Is(err, bus.ErrReplayRefused) {
				t.Errorf("CheckReplay = %v, want ErrReplayRefused", err)
			}
		})
	}
}

// TestReplayRefusedKept: a dead letter whose original subject is not its
// job's sample subject is refused by ReplayDeadLetter, whatever the
// connection may publish: nothing is written there, and it stays listed.
func TestReplayRefusedKept(t *testing.T) {
	t.Parallel()
	js, topo := dlqFleet(t)
	ns := topo.NS
	forged := deadLetter(ns.SamplesStream(), 3, "$KV."+ns.JobsBucket()+".acme.j1", "unreadable sample request")
	if err := bus.PublishDeadLetter(dlqCtx(t), js, ns, forged); err != nil {
		t.Fatal(err)
	}
	stored := listDL(t, js, ns, "", "", 10)
	if len(stored) != 1 {
		t.Fatalf("DLQ lists %d dead letters, want 1", len(stored))
	}
	_, err := bus.ReplayDeadLetter(dlqCtx(t), js, ns, stored[0].DLQSeq)
	if !errors.Is(err, bus.ErrReplayRefused) || !strings.Contains(err.Error(), forged.Subject) {
		t.Fatalf("ReplayDeadLetter = %v, want ErrReplayRefused naming %s", err, forged.Subject)
	}
	if _, err := topo.Jobs.Get(dlqCtx(t), "acme.j1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the job registry holds acme.j1 after a refused replay (err %v)", err)
	}
	if n := len(listDL(t, js, ns, "", "", 10)); n != 1 {
		t.Errorf("DLQ holds %d dead letters after a refused replay, want it kept", n)
	}
}
