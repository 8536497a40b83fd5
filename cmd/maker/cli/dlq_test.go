package cli

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestDLQReplayAllEmpty: replaying every dead letter of an empty DLQ says
// there was none (an empty array with --json) and succeeds.
func TestDLQReplayAllEmpty(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	if _, err := bus.Ensure(t.Context(), js, bus.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "replay", "--all"}, "no dead letters to replay\n"},
		{[]string{"dlq", "replay", "--all", "--job", "j1"}, "no dead letters to replay\n"},
		{[]string{"dlq", "replay", "--all", "--json"}, "[]\n"},
	} {
		res := runMain(t, append(tc.args, "--nats", srv.URL)...)
		if res.code != ExitOK || res.stdout != tc.want || res.stderr != "" {
			t.Errorf("maker %v: exit %d, stdout %q, stderr %q; want exit 0 and %q", tc.args, res.code, res.stdout, res.stderr, tc.want)
		}
	}
}

// TestDLQReference (issue 9, finding 8): a dead letter whose original was
// too large to keep whole is listed as a reference (size, hash, head
// kept), replayed from the original's stream while it is there, and
// refused with a clear error once it is gone (the dead letter stays).
func TestDLQReference(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	ctx := t.Context()
	topo, err := bus.Ensure(ctx, js, bus.Config{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	ns := topo.NS
	subject := ns.SampleSubject("acme", "big")
	payload := bytes.Repeat([]byte{0xff, 0x00, '{'}, 333_334) // ~1 MB, no JSON
	var dlqSeqs []uint64
	for range 2 {
		ack, err := js.Publish(ctx, subject, payload)
		if err != nil {
			t.Fatal(err)
		}
		dl := &schemas.DeadLetter{Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: ns.SamplesStream(), Seq: ack.Sequence,
			Subject: subject, Consumer: bus.ConsumerVoters, Reason: "unreadable sample request", Deliveries: 1, Data: payload, At: time.Now().UTC()}
		if err := bus.PublishDeadLetter(ctx, js, ns, dl); err != nil {
			t.Fatal(err)
		}
		dls, err := bus.ListDeadLetters(ctx, js, ns, "acme", "big", 10)
		if err != nil {
			t.Fatal(err)
		}
		dlqSeqs = append(dlqSeqs, dls[len(dls)-1].DLQSeq)
	}
	res := runMain(t, "dlq", "list", "--tenant", "acme", "--nats", srv.URL)
	if res.code != ExitOK || strings.Count(res.stdout, "reference: 1000002 B sha256 ") != 2 || !strings.Contains(res.stdout, "first 4096 B kept") {
		t.Fatalf("dlq list: exit %d, stdout %q, stderr %q; want both listed as references", res.code, res.stdout, res.stderr)
	}
	// The first original is still queued: replayed whole.
	res = runMain(t, "dlq", "replay", strconv.FormatUint(dlqSeqs[0], 10), "--nats", srv.URL)
	if res.code != ExitOK || !strings.Contains(res.stdout, "replayed") {
		t.Fatalf("replay of a reference whose original is there: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	// The second original is gone (its request was terminated).
	s, err := js.Stream(ctx, ns.SamplesStream())
	if err != nil {
		t.Fatal(err)
	}
	dls, err := bus.ListDeadLetters(ctx, js, ns, "acme", "big", 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("after one replay: %d dead letters (err %v), want 1", len(dls), err)
	}
	if err := s.DeleteMsg(ctx, dls[0].Seq); err != nil {
		t.Fatal(err)
	}
	res = runMain(t, "dlq", "replay", strconv.FormatUint(dlqSeqs[1], 10), "--nats", srv.URL)
	if res.code == ExitOK || !strings.Contains(res.stderr, "original is gone") || !strings.Contains(res.stderr, "no longer holds it") {
		t.Fatalf("replay of a reference whose original is gone: exit %d, stdout %q, stderr %q; want a clear error", res.code, res.stdout, res.stderr)
	}
	if dls, err := bus.ListDeadLetters(ctx, js, ns, "acme", "big", 10); err != nil || len(dls) != 1 {
		t.Errorf("after the failed replay: %d dead letters (err %v), want it kept", len(dls), err)
	}
}
