package api_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/webhook"
	"github.com/makerfleet/makerfleet/schemas"
)

// startWebhooks reads (or makes) the fleet's master secret and returns
// the tenants' secrets; with deliver, a deliverer of cfg runs until the
// test ends.
func (e *apiEnv) startWebhooks(ctx context.Context, cfg webhook.Config, deliver bool) func(string) string {
	e.t.Helper()
	master, err := webhook.MasterSecret(ctx, e.fleet.Topo.Webhooks, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if deliver {
		e.runDeliverer(cfg)
	}
	return func(tenant string) string { return webhook.Secret(webhook.TenantKey(master, tenant)) }
}

// runDeliverer starts a deliverer of cfg (on the fleet's stored master
// secret) until the test ends.
func (e *apiEnv) runDeliverer(cfg webhook.Config) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	master, err := webhook.MasterSecret(ctx, e.fleet.Topo.Webhooks, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.Master, cfg.Logger = master, e.fleet.Log
	d, err := webhook.New(e.fleet.Topo, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }() // owned: awaited at cleanup
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("deliverer: %v", err)
		}
	})
}

// fastHooks are deliveries retried within milliseconds, to receivers on
// loopback (which they may reach).
func fastHooks(attempts int) *webhook.Config {
	return &webhook.Config{
		InitialBackoff: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond, MaxAttempts: attempts, Timeout: 5 * time.Second,
		Guard: &webhook.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	}
}

// delivery is one request a receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is a webhook receiver on loopback answering status(n) to its
// n-th request (from 1); every request is sent on got.
type receiver struct {
	*httptest.Server
	got chan delivery
}

func newReceiver(t *testing.T, status func(n int) int) *receiver {
	t.Helper()
	r := &receiver{got: make(chan delivery, 64)}
	var (
		mu sync.Mutex
		n  int
	)
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		mu.Lock()
		n++
		code := status(n)
		mu.Unlock()
		r.got <- delivery{header: req.Header.Clone(), body: b}
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

// next is the receiver's next request, or a failure when none comes.
func (r *receiver) next(t *testing.T, ctx context.Context) delivery {
	t.Helper()
	select {
	case d := <-r.got:
		return d
	case <-ctx.Done():
		t.Fatal("no webhook delivery came")
		return delivery{}
	}
}

// verify checks d's signature by the Standard Webhooks scheme, written
// out here from the scheme itself (not internal/webhook's Sign), with
// tenant secret (whsec_<base64 key>).
func verify(t *testing.T, secret string, d delivery) {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret %q is not whsec_<base64>", secret)
	}
	id, ts := d.header.Get("webhook-id"), d.header.Get("webhook-timestamp")
	if id == "" || ts == "" {
		t.Fatalf("headers %v lack webhook-id or webhook-timestamp", d.header)
	}
	if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		t.Errorf("webhook-timestamp %q is not now in unix seconds", ts)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(d.body)))
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	ok := false
	for sig := range strings.FieldsSeq(d.header.Get("webhook-signature")) {
		if v, s, _ := strings.Cut(sig, ","); v == "v1" && hmac.Equal([]byte(s), []byte(want)) {
			ok = true
		}
	}
	if !ok {
		t.Errorf("webhook-signature %q does not verify (want v1,%s)", d.header.Get("webhook-signature"), want)
	}
}

// secretOf is tenant's secret, read through the API with its key.
func (e *apiEnv) secretOf(tenant string) schemas.WebhookSecret {
	e.t.Helper()
	var s schemas.WebhookSecret
	e.json(http.MethodGet, "/v1/webhooks/secret", e.key[tenant], nil).decode(e.t, http.StatusOK, &s)
	return s
}

// jobHook waits until the job's webhook is no longer pending (polling
// GET /v1/jobs/{id} with a deadline) and returns it.
func (e *apiEnv) jobHook(ctx context.Context, tenant, id string) schemas.WebhookView {
	e.t.Helper()
	for {
		var v schemas.JobView
		e.json(http.MethodGet, "/v1/jobs/"+id, e.key[tenant], nil).decode(e.t, http.StatusOK, &v)
		if v.Webhook == nil {
			e.t.Fatalf("job %s shows no webhook", id)
		}
		if v.Webhook.State != schemas.WebhookPending {
			return *v.Webhook
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("job %s's webhook still pending: %+v", id, v.Webhook)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// drained waits until the webhook stream holds nothing: no delivery left
// to make or retry.
func (e *apiEnv) drained(ctx context.Context) {
	e.t.Helper()
	for {
		c, err := e.fleet.JS.Consumer(ctx, e.fleet.Topo.NS.WebhooksStream(), bus.ConsumerWebhooks)
		if err != nil {
			e.t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("webhook stream not drained: %+v", info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestWebhookJobDelivered: a job submitted through the API with a webhook
// is POSTed once it ends, signed with its tenant's secret; the receiver
// fails the first two attempts, so the job shows three, the last one
// delivered, with the same delivery id each time; nothing is left to
// deliver after.
func TestWebhookJobDelivered(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	e := newEnv(t, options{run: true, webhooks: fastHooks(5)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := hanoi(2)
	req.Webhook = rcv.URL + "/hooks/maker?src=test"
	c := e.submit(alpha, req)
	secret := e.secretOf(alpha).Secret

	var ids []string
	for range 3 {
		d := rcv.next(t, ctx)
		verify(t, secret, d)
		ids = append(ids, d.header.Get("webhook-id"))
		if ct := d.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		var ev schemas.WebhookEvent
		dec := json.NewDecoder(strings.NewReader(string(d.body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("body %s: %v", d.body, err)
		}
		if ev.Type != schemas.WebhookJobFinished || ev.Data.Tenant != alpha || ev.Data.JobID != c.ID ||
			ev.Data.State != schemas.StateSolved || ev.Data.Report == nil || !ev.Data.Report.Solved || ev.Data.Report.Steps != 3 {
			t.Errorf("event %s", d.body)
		}
		if ev.Data.Links["result"] != "/v1/jobs/"+c.ID+"/result" {
			t.Errorf("links %v", ev.Data.Links)
		}
	}
	if ids[0] == "" || ids[0] != ids[1] || ids[1] != ids[2] {
		t.Errorf("delivery ids %v: want one id, stable across retries", ids)
	}
	hook := e.jobHook(ctx, alpha, c.ID)
	if hook.State != schemas.WebhookDelivered || hook.ID != ids[0] || hook.URL != req.Webhook || len(hook.Attempts) != 3 {
		t.Fatalf("webhook %+v: want delivered after 3 attempts", hook)
	}
	for i, a := range hook.Attempts {
		want := http.StatusServiceUnavailable
		if i == 2 {
			want = http.StatusNoContent
		}
		if a.StatusCode != want || (i < 2) != (a.Error != "" && a.NextRetryAt != nil) || a.At.IsZero() {
			t.Errorf("attempt %d: %+v, want status %d", i+1, a, want)
		}
	}
	e.drained(ctx)
	select {
	case d := <-rcv.got:
		t.Errorf("a fourth delivery after it was delivered: %s", d.body)
	default:
	}
	// The tenant's deliveries list it; another tenant's does not.
	var list schemas.WebhookDeliveryList
	e.json(http.MethodGet, "/v1/webhooks/deliveries", e.key[alpha], nil).decode(t, http.StatusOK, &list)
	if len(list.Deliveries) != 1 || list.Deliveries[0].JobID != c.ID || list.Deliveries[0].State != schemas.WebhookDelivered {
		t.Errorf("alpha's deliveries %+v", list.Deliveries)
	}
	e.json(http.MethodGet, "/v1/webhooks/deliveries", e.key[beta], nil).decode(t, http.StatusOK, &list)
	if len(list.Deliveries) != 0 {
		t.Errorf("beta sees %+v", list.Deliveries)
	}
}

// TestWebhookBatchDelivered: a batch's end is delivered (batch.finished
// with its counts), and the batch shows it; a line's own webhook gets its
// job's end.
func TestWebhookBatchDelivered(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(int) int { return http.StatusOK })
	e := newEnv(t, options{run: true, webhooks: fastHooks(3)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lines := `{"custom_id":"a","task":"hanoi","params":{"disks":2},"k":2}` + "\n" +
		`{"custom_id":"b","task":"hanoi","params":{"disks":2},"k":2,"webhook":"` + rcv.URL + `/line"}` + "\n" +
		`{"custom_id":"c","task":"nope","params":{},"k":2}` + "\n"
	r := e.do(http.MethodPost, "/v1/batches?webhook="+url.QueryEscape(rcv.URL+"/batch"), e.key[beta], "application/jsonl", strings.NewReader(lines))
	var rec schemas.BatchRecord
	r.decode(t, http.StatusCreated, &rec)
	if rec.Webhook != rcv.URL+"/batch" {
		t.Fatalf("batch record's webhook %q", rec.Webhook)
	}
	secret := e.secretOf(beta).Secret
	var batchEv, lineEv *schemas.WebhookEvent
	for batchEv == nil || lineEv == nil {
		d := rcv.next(t, ctx)
		verify(t, secret, d)
		var ev schemas.WebhookEvent
		if err := json.Unmarshal(d.body, &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case schemas.WebhookBatchFinished:
			batchEv = &ev
		case schemas.WebhookJobFinished:
			lineEv = &ev
		}
	}
	if d := batchEv.Data; d.BatchID != rec.ID || d.Tenant != beta || d.State != schemas.BatchCompleted || d.Counts == nil ||
		d.Counts.Completed != 2 || d.Counts.Failed != 1 || d.Links["output"] != "/v1/batches/"+rec.ID+"/output" {
		t.Errorf("batch event %+v", batchEv)
	}
	if d := lineEv.Data; d.JobID != schemas.BatchJobID(rec.ID, 2) || d.BatchID != rec.ID {
		t.Errorf("line's job event %+v", lineEv.Data)
	}
	for {
		var got schemas.BatchRecord
		e.json(http.MethodGet, "/v1/batches/"+rec.ID, e.key[beta], nil).decode(t, http.StatusOK, &got)
		if w := got.WebhookDelivery; w != nil && w.State == schemas.WebhookDelivered {
			if len(w.Attempts) != 1 || w.Attempts[0].StatusCode != http.StatusOK || w.ID != rec.ID {
				t.Errorf("batch delivery %+v", w)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("batch delivery %+v", got.WebhookDelivery)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestWebhookPrivateRefused: without the operator's leave, a delivery to
// loopback or to the cloud metadata address is never made: each attempt
// is recorded failed, saying why, and the receiver hears nothing.
func TestWebhookPrivateRefused(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(int) int { return http.StatusOK })
	hooks := fastHooks(2)
	hooks.Guard = &webhook.Guard{}
	e := newEnv(t, options{run: true, webhooks: hooks})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, tc := range []struct{ url, why string }{
		{rcv.URL + "/x", "127.0.0.1 is loopback"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254 is link-local"},
		{"http://[::1]:1/x", "::1 is loopback"},
	} {
		req := hanoi(2)
		req.Webhook = tc.url
		c := e.submit(alpha, req)
		hook := e.jobHook(ctx, alpha, c.ID)
		if hook.State != schemas.WebhookFailed || len(hook.Attempts) != 2 {
			t.Fatalf("%s: webhook %+v, want failed after 2 attempts", tc.url, hook)
		}
		for _, a := range hook.Attempts {
			if a.StatusCode != 0 || !strings.Contains(a.Error, tc.why) || !strings.Contains(a.Error, "address refused") {
				t.Errorf("%s: attempt %+v, want refused: %s", tc.url, a, tc.why)
			}
		}
	}
	select {
	case d := <-rcv.got:
		t.Errorf("the loopback receiver was called: %s", d.body)
	default:
	}
}

// TestWebhookBadURL: a webhook that is not an absolute http(s) URL without
// user info is refused at submit, the job never queued; so is a batch's.
func TestWebhookBadURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	regBefore, seqBefore := e.enqueued()
	for _, u := range []string{"ftp://example.com/x", "/relative", "https://user:secret@example.com/x", "https://",
		"https://example.com/" + strings.Repeat("a", schemas.MaxWebhookURLBytes)} {
		req := hanoi(2)
		req.Webhook = u
		p := e.json(http.MethodPost, "/v1/jobs", e.key[alpha], req).problem(t, http.StatusUnprocessableEntity, "invalid-request")
		if len(p.Errors) != 1 || p.Errors[0].Path != "/webhook" {
			t.Errorf("%.40s: problem %+v, want a /webhook field error", u, p)
		}
	}
	if reg, seq := e.enqueued(); reg != regBefore || seq != seqBefore {
		t.Errorf("refused jobs were queued: %d registered, seq %d (before %d, %d)", reg, seq, regBefore, seqBefore)
	}
	r := e.do(http.MethodPost, "/v1/batches?webhook="+url.QueryEscape("gopher://x"), e.key[alpha], "application/jsonl",
		strings.NewReader(`{"custom_id":"a","task":"hanoi","params":{"disks":2},"k":2}`+"\n"))
	r.problem(t, http.StatusUnprocessableEntity, "invalid-request")
}

// TestWebhookSecretOwnTenant: each key reads its own tenant's secret,
// whatever it asks; tenants' secrets differ.
func TestWebhookSecretOwnTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{webhooks: fastHooks(1), noDeliverer: true})
	a, b := e.secretOf(alpha), e.secretOf(beta)
	if a.Tenant != alpha || b.Tenant != beta || a.Secret == b.Secret || !strings.HasPrefix(a.Secret, "whsec_") {
		t.Fatalf("secrets %+v %+v", a, b)
	}
	var s schemas.WebhookSecret
	e.json(http.MethodGet, "/v1/webhooks/secret?tenant=beta", e.key[alpha], nil).decode(t, http.StatusOK, &s)
	if s != a {
		t.Errorf("alpha asking for beta's secret got %+v, want its own", s)
	}
	e.json(http.MethodGet, "/v1/webhooks/secret?tenant=alpha", e.admin, nil).decode(t, http.StatusOK, &s)
	if s.Tenant != ops || s.Secret == a.Secret {
		t.Errorf("the admin key got %+v, want ops's own", s)
	}
	e.json(http.MethodGet, "/v1/webhooks/secret", "", nil).problem(t, http.StatusUnauthorized, "unauthorized")
	// A server without webhooks says so.
	bare := newEnv(t, options{})
	bare.json(http.MethodGet, "/v1/webhooks/secret", bare.key[alpha], nil).problem(t, http.StatusNotImplemented, "not-implemented")
}

// TestWebhookWithoutServe: a job that ends while no server delivers
// webhooks is delivered, once, when one starts.
func TestWebhookWithoutServe(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(int) int { return http.StatusOK })
	e := newEnv(t, options{run: true, webhooks: fastHooks(3), noDeliverer: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := hanoi(2)
	req.Webhook = rcv.URL
	c := e.submit(alpha, req)
	if st := e.end(ctx, alpha, c.ID, true); st != schemas.StateSolved {
		t.Fatalf("job ended %s", st)
	}
	// Queued, waiting for a server.
	for {
		cons, err := e.fleet.JS.Consumer(ctx, e.fleet.Topo.NS.WebhooksStream(), bus.ConsumerWebhooks)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no delivery queued: %+v", info)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if h := e.jobHook2(alpha, c.ID); h.State != schemas.WebhookPending || len(h.Attempts) != 0 {
		t.Fatalf("before any server: %+v", h)
	}
	e.runDeliverer(*fastHooks(3))
	e.runDeliverer(*fastHooks(3)) // two servers: still one delivery
	d := rcv.next(t, ctx)
	verify(t, e.secretOf(alpha).Secret, d)
	if h := e.jobHook(ctx, alpha, c.ID); h.State != schemas.WebhookDelivered || len(h.Attempts) != 1 {
		t.Fatalf("webhook %+v", h)
	}
	e.drained(ctx)
	select {
	case d := <-rcv.got:
		t.Errorf("delivered twice: %s", d.body)
	default:
	}
}

// jobHook2 is the job's webhook as it stands now.
func (e *apiEnv) jobHook2(tenant, id string) schemas.WebhookView {
	e.t.Helper()
	var v schemas.JobView
	e.json(http.MethodGet, "/v1/jobs/"+id, e.key[tenant], nil).decode(e.t, http.StatusOK, &v)
	if v.Webhook == nil {
		e.t.Fatalf("job %s shows no webhook", id)
	}
	return *v.Webhook
}
