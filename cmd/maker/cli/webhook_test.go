package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/internal/webhook"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestStatusWebhook: maker status shows a job's webhook under its line:
// pending before any attempt, then its attempts as recorded; a job with
// none shows no webhook line.
func TestStatusWebhook(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	ctx := t.Context()
	topo, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	submitted := time.Unix(1764590400, 0).UTC()
	register := func(id, hook string) {
		spec := schemas.JobSpec{Header: schemas.NewHeader(schemas.KindJobSpec), Tenant: "default", JobID: id,
			Task: "hanoi", Params: json.RawMessage(`{"disks":2}`), K: 1, Webhook: hook, SubmittedAt: submitted}
		spec.ApplyDefaults()
		rec := schemas.JobRecord{Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: "default", JobID: id, Spec: spec,
			Control: schemas.ControlRun, State: schemas.StateSolved, Finished: true, UpdatedAt: submitted}
		if err := jobs.Register(ctx, topo, &rec); err != nil {
			t.Fatal(err)
		}
		st := schemas.JobStatus{Header: schemas.NewHeader(schemas.KindJobStatus), Tenant: "default", JobID: id,
			State: schemas.StateSolved, Steps: 3, TotalSteps: 3, Progress: 1, UpdatedAt: submitted}
		data, err := schemas.Encode(&st)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topo.Status.Put(ctx, bus.JobKey("default", id), data); err != nil {
			t.Fatal(err)
		}
	}
	register("plain", "")
	register("hooked", "https://hooks.example.com/x")
	register("retrying", "https://hooks.example.com/y")
	next := submitted.Add(10 * time.Second)
	rec := schemas.WebhookDelivery{
		Header: schemas.NewHeader(schemas.KindWebhookDelivery), ID: schemas.WebhookJobDeliveryID("retrying", submitted),
		Tenant: "default", Type: schemas.WebhookJobFinished, JobID: "retrying", URL: "https://hooks.example.com/y",
		State: schemas.WebhookPending, CreatedAt: submitted, UpdatedAt: submitted,
		Attempts: []schemas.WebhookAttempt{{At: submitted.Add(5 * time.Second), DurationMS: 40, StatusCode: 503,
			Error: "receiver answered 503 Service Unavailable", NextRetryAt: &next}},
	}
	if _, err := bus.NewKV(topo.Webhooks, bus.MessageCodec[schemas.WebhookDelivery]()).Create(ctx, webhook.RecordKey("default", rec.ID), &rec); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ job, want string }{
		{"plain", ""},
		{"hooked", "  webhook https://hooks.example.com/x: pending\n"},
		{"retrying", "  webhook https://hooks.example.com/y: pending after 1 attempt(s); last at 2025-12-01T12:00:05Z, status 503: " +
			"receiver answered 503 Service Unavailable; next at 2025-12-01T12:00:10Z\n"},
	} {
		res := runMain(t, "status", tc.job, "--nats", srv.URL)
		if res.code != ExitOK {
			t.Fatalf("status %s: exit %d: %s", tc.job, res.code, res.stderr)
		}
		lines := strings.SplitAfter(res.stdout, "\n")
		if !strings.HasPrefix(lines[0], "default/"+tc.job+": solved") {
			t.Errorf("status %s: %q", tc.job, res.stdout)
		}
		if got := strings.Join(lines[1:], ""); got != tc.want {
			t.Errorf("status %s: webhook line %q, want %q", tc.job, got, tc.want)
		}
	}
}

// TestWebhookFlagRefused: a --webhook that is not an http(s) URL without
// user info is a usage error (exit 2) before anything is dialled or sent.
func TestWebhookFlagRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"submit", "--task", "hanoi", "--disks", "2", "--k", "1", "--webhook", "ftp://example.com/x"},
		{"submit", "--task", "hanoi", "--disks", "2", "--k", "1", "--webhook", "https://user:pw@example.com/x"},
		{"batch", "submit", "does-not-exist.jsonl", "--webhook", "/relative"},
	} {
		res := runMain(t, append(args, "--nats", "nats://127.0.0.1:1")...)
		if res.code != ExitUsage || !strings.Contains(res.stderr, "--webhook") {
			t.Errorf("maker %v: exit %d, stderr %q; want exit %d naming --webhook", args, res.code, res.stderr, ExitUsage)
		}
	}
}
