package bus_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// garbage is an unreadable request of n random bytes, near the 1 MiB
// limit: whole and base64-encoded in a dead letter it could never be
// stored.
func garbage(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestDeadLetterOversize (issue 9, finding 8): a voter drops an unreadable
// ~1 MB request. The dead letter keeps a reference (stream, sequence,
// size, SHA-256, the first 4 KiB) and the request is terminated: it leaves
// the work queue instead of coming back for good. Its replay says the
// original is gone, and the dead letter stays.
func TestDeadLetterOversize(t *testing.T) {
	t.Parallel()
	js, topo := dlqFleet(t)
	ns := topo.NS
	ctx := dlqCtx(t)
	payload := garbage(t, 1_000_000)
	ack, err := js.Publish(ctx, ns.SampleSubject("acme", "j1"), payload)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, ns.SamplesStream(), bus.ConsumerVoters)
	if err != nil {
		t.Fatal(err)
	}
	w, err := bus.NewWorker(js, cons, func(context.Context, jetstream.Msg) error {
		return bus.Drop(errors.New("not a sample request"), "unreadable sample request")
	}, bus.WorkerConfig{
		Recreate:    func(context.Context) (jetstream.Consumer, error) { return cons, nil },
		DeadLetters: true, RetryDelay: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	dlq, err := js.Stream(ctx, ns.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		si, err := dlq.Info(ctx)
		return err == nil && si.State.Msgs > 0
	}, "the unreadable 1 MB request was never dead-lettered")
	w.Stop()
	dls := listDL(t, js, ns, "", "", 10)
	dl := dls[0]
	if len(dls) != 1 || !dl.Truncated || dl.Size != len(payload) || dl.SHA256 != sha(payload) ||
		!bytes.Equal(dl.Data, payload[:bus.DeadLetterHead]) || dl.Stream != ns.SamplesStream() || dl.Seq != ack.Sequence ||
		dl.Subject != ns.SampleSubject("acme", "j1") || dl.Reason != "unreadable sample request" {
		t.Fatalf("dead letters %d, first: truncated %v size %d sha %s data %d bytes stream %s seq %d (want %d) subject %s reason %q",
			len(dls), dl.Truncated, dl.Size, dl.SHA256, len(dl.Data), dl.Stream, dl.Seq, ack.Sequence, dl.Subject, dl.Reason)
	}
	// Settled: nothing pending on the voters' consumer, nothing left in
	// the work queue.
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("voters' consumer: pending %d, ack pending %d, redelivered %d; want the request settled at once",
			info.NumPending, info.NumAckPending, info.NumRedelivered)
	}
	s, err := js.Stream(ctx, ns.SamplesStream())
	if err != nil {
		t.Fatal(err)
	}
	if si, err := s.Info(ctx); err != nil || si.State.Msgs != 0 {
		t.Errorf("samples stream holds %v messages (err %v), want 0", si.State.Msgs, err)
	}
	// The original is gone with its termination: the replay says so and
	// the dead letter stays.
	_, err = bus.ReplayDeadLetter(ctx, js, ns, dl.DLQSeq)
	if !errors.Is(err, bus.ErrOriginalGone) {
		t.Fatalf("replay of a reference whose original is gone: %v, want ErrOriginalGone", err)
	}
	if got := listDL(t, js, ns, "", "", 10); len(got) != 1 {
		t.Errorf("after a failed replay the DLQ holds %d dead letters, want 1", len(got))
	}
}

// TestDeadLetterReference: a dead letter that would not fit keeps a
// reference, small ones are kept whole (with size and hash); replaying a
// reference reads the original from its stream while it is there.
func TestDeadLetterReference(t *testing.T) {
	t.Parallel()
	js, topo := dlqFleet(t)
	ns := topo.NS
	ctx := dlqCtx(t)
	subject := ns.SampleSubject("acme", "j2")
	for _, tc := range []struct {
		name      string
		size      int
		truncated bool
	}{
		{"small kept whole", 100, false},
		{"just fits kept whole", 700_000, false}, // 933 KB in base64
		{"too large by its encoding", 800_000, true},
		{"at the limit", 1<<20 - 2<<10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payload := garbage(t, tc.size)
			ack, err := js.Publish(ctx, subject, payload)
			if err != nil {
				t.Fatal(err)
			}
			dl := deadLetter(ns.SamplesStream(), ack.Sequence, subject, tc.name)
			dl.Data = payload
			if err := bus.PublishDeadLetter(ctx, js, ns, dl); err != nil {
				t.Fatal(err)
			}
			var got *schemas.StoredDeadLetter
			for _, d := range listDL(t, js, ns, "acme", "j2", 100) {
				if d.Seq == ack.Sequence {
					got = &d
				}
			}
			if got == nil {
				for _, d := range listDL(t, js, ns, "", "", 100) {
					t.Logf("have seq %d reason %q truncated %v size %d", d.Seq, d.Reason, d.Truncated, d.Size)
				}
				t.Fatal("dead letter not stored")
			}
			wantData := payload
			if tc.truncated {
				wantData = payload[:bus.DeadLetterHead]
			}
			if got.Truncated != tc.truncated || got.Size != tc.size || got.SHA256 != sha(payload) || !bytes.Equal(got.Data, wantData) {
				t.Fatalf("truncated %v size %d sha %s data %d bytes; want truncated %v size %d sha %s data %d bytes",
					got.Truncated, got.Size, got.SHA256, len(got.Data), tc.truncated, tc.size, sha(payload), len(wantData))
			}
			// The original is still in its stream: the replay publishes it
			// whole.
			if _, err := bus.ReplayDeadLetter(ctx, js, ns, got.DLQSeq); err != nil {
				t.Fatal(err)
			}
			s, err := js.Stream(ctx, ns.SamplesStream())
			if err != nil {
				t.Fatal(err)
			}
			last, err := s.GetLastMsgForSubject(ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			if last.Sequence == ack.Sequence || !bytes.Equal(last.Data, payload) {
				t.Fatalf("replayed message: seq %d (original %d), %d bytes equal %v", last.Sequence, ack.Sequence, len(last.Data), bytes.Equal(last.Data, payload))
			}
		})
	}
}

// TestDeadLetterValidate: a reference needs what finds and checks its
// original; dead letters of an older release (no size, no hash) stay
// readable.
func TestDeadLetterValidate(t *testing.T) {
	t.Parallel()
	ok := func() *schemas.DeadLetter {
		d := deadLetter("S", 7, "maker.v1.sample.a.j", "r")
		d.Size, d.SHA256 = len(d.Data), sha(d.Data)
		return d
	}
	for _, tc := range []struct {
		name   string
		mutate func(*schemas.DeadLetter)
		valid  bool
	}{
		{"whole", func(*schemas.DeadLetter) {}, true},
		{"older release", func(d *schemas.DeadLetter) { d.Size, d.SHA256 = 0, "" }, true},
		{"reference", func(d *schemas.DeadLetter) { d.Truncated, d.Size = true, 1<<20 }, true},
		{"reference without hash", func(d *schemas.DeadLetter) { d.Truncated, d.Size, d.SHA256 = true, 1<<20, "" }, false},
		{"reference without sequence", func(d *schemas.DeadLetter) { d.Truncated, d.Size, d.Seq = true, 1<<20, 0 }, false},
		{"reference of the whole", func(d *schemas.DeadLetter) { d.Truncated = true }, false},
		{"size below data", func(d *schemas.DeadLetter) { d.Size = 2 }, false},
		{"bad hash", func(d *schemas.DeadLetter) { d.SHA256 = "XYZ" }, false},
	} {
		d := ok()
		tc.mutate(d)
		data, err := schemas.Encode(d)
		if (err == nil) != tc.valid {
			t.Errorf("%s: Encode err %v, want valid %v", tc.name, err, tc.valid)
			continue
		}
		if err == nil {
			var back schemas.DeadLetter
			if err := schemas.Decode(data, &back); err != nil {
				t.Errorf("%s: Decode: %v", tc.name, err)
			}
		}
	}
}
