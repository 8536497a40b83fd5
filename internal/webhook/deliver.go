package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// Config configures a Deliverer. Zero fields take the documented
// defaults.
type Config struct {
	// Master is the master secret tenants' keys derive from (TenantKey).
	// Required (MasterSecret reads or makes one).
	Master []byte
	// Guard decides where deliveries may connect. Default: the zero
	// Guard, which refuses every private, loopback, link-local and
	// reserved address.
	Guard *Guard
	// Timeout bounds one attempt: connecting, sending, the answer's
	// headers and reading (a bounded part of) its body. Default 10s.
	Timeout time.Duration
	// InitialBackoff is the wait after a first failed attempt; each
	// later wait doubles, up to MaxBackoff. Default 5s and 10m.
	InitialBackoff, MaxBackoff time.Duration
	// MaxAttempts is how many attempts a delivery gets before it is
	// given up (failed). Default 12 (about 50 minutes with the default
	// backoff), at most schemas.MaxWebhookAttempts.
	MaxAttempts int
	// MaxResponseBytes bounds how much of an answer's body is read (and
	// thrown away). Default 64 KiB.
	MaxResponseBytes int64
	// Concurrency is how many deliveries one server makes at once.
	// Default 8.
	Concurrency int
	// UserAgent is sent with every delivery. Default "makerfleet-webhook/1".
	UserAgent string
	// Logger receives the deliverer's notices. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) defaults() error {
	if len(c.Master) < 16 {
		return fmt.Errorf("webhook: the master secret must be at least 16 bytes, got %d", len(c.Master))
	}
	if c.Guard == nil {
		c.Guard = &Guard{}
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.InitialBackoff == 0 {
		c.InitialBackoff = 5 * time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 10 * time.Minute
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 12
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = 64 << 10
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.UserAgent == "" {
		c.UserAgent = "makerfleet-webhook/1"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Timeout < 0 || c.InitialBackoff < 0 || c.MaxBackoff < c.InitialBackoff:
		return fmt.Errorf("webhook: timeout and backoffs must be > 0, the max backoff at least the initial")
	case c.MaxAttempts < 1 || c.MaxAttempts > schemas.MaxWebhookAttempts:
		return fmt.Errorf("webhook: max attempts must be between 1 and %d, got %d", schemas.MaxWebhookAttempts, c.MaxAttempts)
	case c.Concurrency < 1 || c.Concurrency > 1000:
		return fmt.Errorf("webhook: concurrency must be between 1 and 1000, got %d", c.Concurrency)
	}
	return nil
}

// Deliverer makes the fleet's webhook deliveries: it pulls tasks from the
// webhook stream's durable consumer (shared by every maker serve), POSTs
// them and records every attempt.
type Deliverer struct {
	topo   *topology.Topology
	cfg    Config
	client *http.Client
	recs   *bus.KV[schemas.WebhookDelivery]
	now    func() time.Time
}

// New returns a Deliverer on topo's webhook stream and bucket.
func New(topo *topology.Topology, cfg Config) (*Deliverer, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if topo == nil || topo.Webhooks == nil {
		return nil, fmt.Errorf("webhook: no webhooks bucket in the topology")
	}
	dialer := cfg.Guard.Dialer(net.Dialer{Timeout: cfg.Timeout})
	tr := &http.Transport{
		// No proxy: the guard checks the address actually dialled.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	client := &http.Client{
		Transport: tr,
		Timeout:   cfg.Timeout,
		// A redirect is an answer, not an instruction: it is not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Deliverer{
		topo: topo, cfg: cfg, client: client, now: time.Now,
		recs: bus.NewKV(topo.Webhooks, bus.MessageCodec[schemas.WebhookDelivery]()),
	}, nil
}

// Run delivers until ctx ends, then stops gracefully.
func (d *Deliverer) Run(ctx context.Context) error {
	bind := func(ctx context.Context) (jetstream.Consumer, error) {
		return d.topo.JS.Consumer(ctx, d.topo.NS.WebhooksStream(), bus.ConsumerWebhooks)
	}
	cons, err := bind(ctx)
	if err != nil {
		return fmt.Errorf("webhook: bind the webhook consumer: %w", err)
	}
	w, err := bus.NewWorker(d.topo.JS, cons, d.handle, bus.WorkerConfig{
		Recreate: bind, Concurrency: d.cfg.Concurrency, Namespace: d.topo.NS, SoftStop: d.cfg.Timeout + 5*time.Second,
		Logger: d.cfg.Logger,
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// handle makes one attempt of the task msg carries.
func (d *Deliverer) handle(ctx context.Context, msg jetstream.Msg) error {
	var t schemas.WebhookTask
	if err := schemas.Decode(msg.Data(), &t); err != nil {
		return bus.Drop(err, "webhook task unreadable")
	}
	// The subject, which only the fleet's roles may publish on, says
	// whose it is; the body must agree.
	if want := d.topo.NS.WebhookSubject(t.Tenant, t.ID); msg.Subject() != want {
		return bus.Drop(fmt.Errorf("webhook: task on %s names %s", msg.Subject(), want), "webhook task's subject and body disagree")
	}
	key := RecordKey(t.Tenant, t.ID)
	rec, _, err := d.recs.Get(ctx, key)
	switch {
	case err == nil && rec.State != schemas.WebhookPending:
		return nil // delivered, or given up: never again
	case err != nil && !errors.Is(err, bus.ErrNotFound) && !errors.Is(err, bus.ErrBadValue):
		return err // read again after the worker's retry delay
	}
	n := 1
	if rec != nil {
		n = len(rec.Attempts) + 1
	}
	a := d.attempt(ctx, &t)
	state := schemas.WebhookPending
	var delay time.Duration
	switch {
	case a.Error == "":
		state = schemas.WebhookDelivered
	case n >= d.cfg.MaxAttempts:
		state = schemas.WebhookFailed
	default:
		delay = d.backoff(n)
		next := a.At.Add(a.time() + delay).UTC()
		a.NextRetryAt = &next
	}
	now := d.now().UTC()
	if _, err := d.recs.Update(ctx, key, func(cur *schemas.WebhookDelivery) (*schemas.WebhookDelivery, error) {
		if cur == nil || cur.ID != t.ID || cur.Tenant != t.Tenant {
			cur = &schemas.WebhookDelivery{
				Header: schemas.NewHeader(schemas.KindWebhookDelivery), ID: t.ID, Tenant: t.Tenant, Type: t.Event.Type,
				JobID: t.Event.Data.JobID, BatchID: t.Event.Data.BatchID, URL: t.URL, CreatedAt: a.At,
			}
			if t.Event.Type == schemas.WebhookJobFinished {
				cur.BatchID = ""
			}
		}
		cur.Attempts = append(cur.Attempts, a.WebhookAttempt)
		if len(cur.Attempts) > schemas.MaxWebhookAttempts {
			cur.Attempts = slices.Delete(cur.Attempts, 0, len(cur.Attempts)-schemas.MaxWebhookAttempts)
		}
		cur.State, cur.UpdatedAt = state, now
		return cur, nil
	}); err != nil {
		d.cfg.Logger.Warn("webhook: record an attempt", "tenant", t.Tenant, "id", t.ID, "err", err)
		if state == schemas.WebhookPending {
			return bus.Retry(err, delay)
		}
		return err
	}
	switch state {
	case schemas.WebhookDelivered:
		d.cfg.Logger.Info("webhook delivered", "tenant", t.Tenant, "id", t.ID, "attempt", n, "status", a.StatusCode)
		return nil
	case schemas.WebhookFailed:
		d.cfg.Logger.Warn("webhook given up", "tenant", t.Tenant, "id", t.ID, "attempts", n, "err", a.Error)
		return nil
	}
	return bus.Retry(errors.New(a.Error), delay)
}

// backoff is the wait after the n-th failed attempt.
func (d *Deliverer) backoff(n int) time.Duration {
	b := d.cfg.InitialBackoff
	for i := 1; i < n && b < d.cfg.MaxBackoff; i++ {
		b *= 2
	}
	return min(b, d.cfg.MaxBackoff)
}

// attempt is one POST, as recorded.
type attempt struct{ schemas.WebhookAttempt }

func (a attempt) time() time.Duration { return time.Duration(a.DurationMS) * time.Millisecond }

// attempt POSTs t's event, signed with its tenant's key.
func (d *Deliverer) attempt(ctx context.Context, t *schemas.WebhookTask) attempt {
	start := d.now()
	a := attempt{schemas.WebhookAttempt{At: start.UTC()}}
	fail := func(format string, args ...any) attempt {
		a.Error = clip(fmt.Sprintf(format, args...))
		a.DurationMS = max(time.Since(start).Milliseconds(), 0)
		return a
	}
	body, err := json.Marshal(t.Event)
	if err != nil {
		return fail("encode the event: %v", err)
	}
	ts := start.Unix()
	actx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return fail("request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.cfg.UserAgent)
	req.Header.Set(HeaderID, t.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(TenantKey(d.cfg.Master, t.Tenant), t.ID, ts, body))
	resp, err := d.client.Do(req)
	if err != nil {
		return fail("%v", err) // a refused address says so (Guard.Check)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, d.cfg.MaxResponseBytes))
	_ = resp.Body.Close()
	a.StatusCode = resp.StatusCode
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fail("receiver answered %s", resp.Status)
	}
	a.DurationMS = max(time.Since(start).Milliseconds(), 0)
	return a
}

// masterKey is the generated master secret's key in the webhooks bucket
// (no tenant starts with '_').
const masterKey = "_secret.master"

// MasterSecret is the master secret: given, when the operator gives one
// (--webhook-secret-file), else the one stored in the webhooks bucket,
// made (32 random bytes) by the first server that needs it.
func MasterSecret(ctx context.Context, kv jetstream.KeyValue, given []byte) ([]byte, error) {
	if len(given) > 0 {
		if len(given) < 16 {
			return nil, fmt.Errorf("webhook: the master secret must be at least 16 bytes, got %d", len(given))
		}
		return given, nil
	}
	for range 3 {
		e, err := kv.Get(ctx, masterKey)
		if err == nil && len(e.Value()) >= 16 {
			return e.Value(), nil
		}
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("webhook: read the master secret: %w", err)
		}
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		if _, err := kv.Create(ctx, masterKey, b); err == nil {
			return b, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("webhook: store the master secret: %w", err)
		}
	}
	return nil, fmt.Errorf("webhook: the master secret could not be read or made")
}
