package cli

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestDLQReplayAllEmpty: replaying every dead letter of an empty DLQ says
// there was none (an empty array with --json) and succeeds.
func TestDLQReplayAllEmpty(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	if _, err := topology.Ensure(t.Context(), js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
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
	topo, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage})
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

// TestDLQReplayForgedSecured (issue 19, item 1): on a secured fleet a
// voter's identity stores forged dead letters whose "original" is an admin
// API key record ($KV.<ns>_apikeys.<sha256 of a key it made up>), one where
// PublishDeadLetter files it and one on a real job's DLQ subject. The
// admin's routine `maker dlq replay --all` refuses both, saying which and
// why, writes no key, still replays the real dead letter among them, and
// exits 1.
func TestDLQReplayForgedSecured(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	as := func(id string, args ...string) outcome {
		return runMain(t, append(args, "--nats", srv.URL, "--nats-nkey", srv.Seed(id))...)
	}
	if res := as(auth.Admin, "topology", "create", "--judge=false"); res.code != ExitOK {
		t.Fatalf("topology create: %d %s", res.code, res.stderr)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	admin, err := jetstream.New(srv.Connect(t, auth.Admin).Conn)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.Open(ctx, admin, topology.Config{})
	if err != nil {
		t.Fatal(err)
	}
	voter, err := jetstream.New(srv.Connect(t, auth.Voter).Conn)
	if err != nil {
		t.Fatal(err)
	}
	ns := topo.NS

	// A real sample request the voter could not read, dead-lettered.
	ack, err := admin.Publish(ctx, ns.SampleSubject("alpha", "j1"), []byte("\xff unreadable"))
	if err != nil {
		t.Fatal(err)
	}
	real := &schemas.DeadLetter{Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: ns.SamplesStream(), Seq: ack.Sequence,
		Subject: ns.SampleSubject("alpha", "j1"), Consumer: bus.ConsumerVoters, Reason: "unreadable sample request",
		Deliveries: 1, Data: []byte("\xff unreadable"), At: time.Now().UTC()}
	if err := bus.PublishDeadLetter(ctx, voter, ns, real); err != nil {
		t.Fatal(err)
	}

	// The forgeries: an admin key record for a key the voter made up.
	key := schemas.APIKeyPrefix + "0123456789ab_" + strings.Repeat("A", 43)
	rec, err := schemas.Encode(&schemas.APIKey{Header: schemas.NewHeader(schemas.KindAPIKey), KeyID: "0123456789ab",
		Prefix: schemas.APIKeyPrefix + "0123456789ab", Tenant: "alpha", Admin: true, CreatedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	forged := &schemas.DeadLetter{Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: ns.SamplesStream(), Seq: 1000,
		Subject: "$KV." + ns.APIKeysBucket() + "." + apikey.Hash(key), Consumer: bus.ConsumerVoters,
		Reason: "unreadable sample request", Deliveries: 1, Data: rec, At: time.Now().UTC()}
	if err := bus.PublishDeadLetter(ctx, voter, ns, forged); err != nil {
		t.Fatal(err)
	}
	forged.Seq++
	data, err := schemas.Encode(forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := voter.Publish(ctx, ns.DLQSubject("alpha", "j1"), data); err != nil {
		t.Fatal(err)
	}

	res := as(auth.Admin, "dlq", "replay", "--all")
	refusals := 0
	for line := range strings.Lines(res.stderr) {
		if strings.HasPrefix(line, "refused ") && strings.Contains(line, forged.Subject) {
			refusals++
		}
	}
	if res.code != ExitError || refusals != 2 ||
		!strings.Contains(res.stderr, "2 of 3 dead letters refused") {
		t.Errorf("dlq replay --all: exit %d, stdout %q, stderr %q; want both forgeries refused, naming their subject, exit 1",
			res.code, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stdout, "to "+ns.SampleSubject("alpha", "j1")) {
		t.Errorf("dlq replay --all: stdout %q; want the real dead letter replayed", res.stdout)
	}
	if _, err := topo.APIKeys.Get(ctx, apikey.Hash(key)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the API key bucket holds the forged key after the replay (err %v)", err)
	}
	if _, err := apikey.New(topo).Authenticate(ctx, key); !errors.Is(err, apikey.ErrUnauthorized) {
		t.Errorf("the forged key authenticates (err %v)", err)
	}
	if dls, err := bus.ListDeadLetters(ctx, admin, ns, "", "", 10); err != nil || len(dls) != 2 {
		t.Errorf("DLQ after the replay: %d dead letters (err %v), want the 2 refused kept", len(dls), err)
	}
}
