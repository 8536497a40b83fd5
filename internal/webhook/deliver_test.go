package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/webhook"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestDeliverNoRedirect: a redirect is a failed attempt, never followed
// (here to the cloud metadata address), and a receiver that answers with
// an endless body is read only up to the bound; the delivery ends failed
// after its attempts, recorded.
func TestDeliverNoRedirect(t *testing.T) {
	t.Parallel()
	var followed atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Add(1) }))
	t.Cleanup(target.Close)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/big") {
			w.WriteHeader(http.StatusBadGateway)
			chunk := []byte(strings.Repeat("x", 32<<10))
			for { // without end: a reader of the whole body would wait out its timeout
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}
		http.Redirect(w, r, target.URL, http.StatusFound)
	}))
	t.Cleanup(rcv.Close)
	js, topo := testkit.StartTopology(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	master, err := webhook.MasterSecret(ctx, topo.Webhooks, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := webhook.MasterSecret(ctx, topo.Webhooks, nil)
	if err != nil || string(again) != string(master) {
		t.Fatalf("the stored master secret read back as another: %v", err)
	}
	d, err := webhook.New(topo, webhook.Config{
		Master: master, MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		MaxResponseBytes: 1 << 10, Guard: &webhook.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }() // owned: awaited below
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for _, tc := range []struct{ job, url, want string }{
		{"redirected", rcv.URL + "/hook", "302 Found"},
		{"big", rcv.URL + "/big", "502 Bad Gateway"},
	} {
		spec := schemas.JobSpec{Tenant: "acme", JobID: tc.job, Webhook: tc.url, SubmittedAt: time.Unix(7, 0)}
		task := webhook.JobTask(spec, schemas.JobReport{State: schemas.StateSolved, Solved: true})
		if err := webhook.Publish(ctx, js, topo.NS, task); err != nil {
			t.Fatal(err)
		}
		recs := bus.NewKV(topo.Webhooks, bus.MessageCodec[schemas.WebhookDelivery]())
		for {
			rec, _, err := recs.Get(ctx, webhook.RecordKey("acme", task.ID))
			if err == nil && rec.State != schemas.WebhookPending {
				if rec.State != schemas.WebhookFailed || len(rec.Attempts) != 2 {
					t.Fatalf("%s: record %+v, want failed after 2 attempts", tc.job, rec)
				}
				for _, a := range rec.Attempts {
					if !strings.Contains(a.Error, tc.want) || a.DurationMS > 5000 {
						t.Errorf("%s: attempt %+v, want %q", tc.job, a, tc.want)
					}
				}
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: no final record: %v %+v", tc.job, err, rec)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}
