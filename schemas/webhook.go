package schemas

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Webhooks: a job or a batch may name a URL its end is POSTed to. Whoever
// ends it (a coordinator, a batch runner, the API for a batch that ends
// at once) publishes one WebhookTask on the webhook stream; `maker serve`
// pulls it, POSTs its Event signed with the tenant's secret (the Standard
// Webhooks scheme: docs/api.md, "Webhooks") and keeps every attempt in a
// WebhookDelivery record the tenant reads.

// Message kinds of webhooks.
const (
	KindWebhookTask     = "webhook_task"
	KindWebhookDelivery = "webhook_delivery"
)

// Webhook event types: what ended.
const (
	WebhookJobFinished   = "job.finished"
	WebhookBatchFinished = "batch.finished"
)

// Webhook delivery states.
const (
	WebhookPending   = "pending"
	WebhookDelivered = "delivered"
	WebhookFailed    = "failed"
)

// Webhook bounds.
const (
	// MaxWebhookURLBytes bounds a webhook URL.
	MaxWebhookURLBytes = 2048
	// MaxWebhookAttempts bounds the attempts a delivery record keeps (the
	// deliverer's own limit is lower: 12 by default).
	MaxWebhookAttempts = 64
	// MaxWebhookReason bounds the reason an event's data carries, and an
	// attempt's error.
	MaxWebhookReason = 1024
)

// ValidWebhookURL checks a webhook URL: an absolute http or https URL
// with a host, no user info, no fragment, no control characters or
// spaces, at most MaxWebhookURLBytes. Where it may point (not at the
// fleet's own or private addresses) is checked when it is dialled.
func ValidWebhookURL(s string) error {
	if len(s) > MaxWebhookURLBytes {
		return fmt.Errorf("%w: webhook URL is %d bytes, at most %d", ErrInvalid, len(s), MaxWebhookURLBytes)
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("%w: webhook URL holds spaces or control characters", ErrInvalid)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%w: webhook URL does not parse: %v", ErrInvalid, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: webhook URL %q must be http:// or https://", ErrInvalid, s)
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%w: webhook URL %q names no host", ErrInvalid, s)
	case u.User != nil:
		return fmt.Errorf("%w: webhook URL may not carry user info (user:secret@); the fleet signs every request instead", ErrInvalid)
	case u.Fragment != "" || strings.Contains(s, "#"):
		return fmt.Errorf("%w: webhook URL may not carry a fragment", ErrInvalid)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: webhook URL port %q is not a port", ErrInvalid, p)
		}
	}
	if h := u.Hostname(); net.ParseIP(h) == nil && !validHostname(h) {
		return fmt.Errorf("%w: webhook URL host %q is not a host name or IP address", ErrInvalid, h)
	}
	return nil
}

// validHostname checks a DNS name: labels of letters, digits, '-' and '_'.
func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for l := range strings.SplitSeq(strings.TrimSuffix(h, "."), ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// WebhookEvent is the body POSTed to a webhook: what ended, and how.
type WebhookEvent struct {
	// Type is job.finished or batch.finished.
	Type string `json:"type" jsonschema:"enum=job.finished,enum=batch.finished"`
	// Timestamp is when the job or batch ended.
	Timestamp time.Time `json:"timestamp"`
	// Data says what ended and how.
	Data WebhookEventData `json:"data"`
}

// WebhookEventData is a webhook event's data.
type WebhookEventData struct {
	// Tenant owns the job or batch.
	Tenant string `json:"tenant"`
	// JobID names the job (job.finished); BatchID the batch
	// (batch.finished), or the batch a job came from.
	JobID   string `json:"job_id,omitempty"`
	BatchID string `json:"batch_id,omitempty"`
	// State is the job's final state (solved, unsolved, no_consensus,
	// failed, cancelled) or the batch's (completed, cancelled).
	State string `json:"state"`
	// Reason says why the job ended so (its report's reason), if it says.
	Reason string `json:"reason,omitempty"`
	// Report sums up a job's report (job.finished).
	Report *WebhookJobSummary `json:"report,omitempty"`
	// Counts are a batch's lines by outcome (batch.finished).
	Counts *BatchCounts `json:"counts,omitempty"`
	// Links are the API paths to read more, relative to the API's base
	// URL: self (the job or batch), and result (a job's report) or output
	// (a batch's output).
	Links map[string]string `json:"links,omitempty"`
}

// WebhookJobSummary is the part of a job's report a webhook carries.
type WebhookJobSummary struct {
	// Solved is true when the task was solved.
	Solved bool `json:"solved"`
	// Steps decided, Samples drawn and Votes counted.
	Steps   int64 `json:"steps"`
	Samples int64 `json:"samples"`
	Votes   int64 `json:"votes"`
	// CostUSD is what the job cost, at the fleet's prices.
	CostUSD float64 `json:"cost_usd"`
	// WallSeconds is how long it ran.
	WallSeconds float64 `json:"wall_seconds"`
}

// WebhookJobDeliveryID is the delivery id of job's end: unique within its
// tenant, and stable across retries (the webhook-id header). submitted is
// the job's submit time, so a job id used again after its job was purged
// names another delivery.
func WebhookJobDeliveryID(job string, submitted time.Time) string {
	return "job_" + job + "_" + strconv.FormatInt(submitted.UnixMilli(), 10)
}

// WebhookBatchDeliveryID is the delivery id of a batch's end (batch ids
// are never used twice).
func WebhookBatchDeliveryID(batch string) string { return batch }

// ValidWebhookDeliveryID checks a delivery id: a job's (job_<job>_<ms>)
// or a batch's (its id).
func ValidWebhookDeliveryID(id string) error {
	if ValidBatchID(id) == nil {
		return nil
	}
	rest, ok := strings.CutPrefix(id, "job_")
	i := strings.LastIndexByte(rest, '_')
	if ok && i > 0 {
		if _, err := strconv.ParseUint(rest[i+1:], 10, 63); err == nil && ValidJobID(rest[:i]) == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: webhook delivery id %q is neither job_<job>_<ms> nor a batch id", ErrInvalid, id)
}

// WebhookTask asks `maker serve` to deliver one event: published on
// <ns>.v1.webhook.<tenant>.<delivery id> (only coordinators and the API
// may), with the delivery id as its Msg-Id, pulled by every serve from
// one durable consumer.
type WebhookTask struct {
	Header
	// Tenant owns the job or batch; it is the subject's, and the event's.
	Tenant string `json:"tenant"`
	// ID is the delivery id (the subject's last token; the webhook-id
	// header).
	ID string `json:"id"`
	// URL is where the event is POSTed (ValidWebhookURL).
	URL string `json:"url"`
	// Event is the body POSTed.
	Event WebhookEvent `json:"event"`
}

// MessageKind implements Message.
func (*WebhookTask) MessageKind() string { return KindWebhookTask }

// Validate implements Message.
func (t *WebhookTask) Validate() error {
	const k = KindWebhookTask
	if err := t.Header.check(k); err != nil {
		return err
	}
	if err := ValidTenant(t.Tenant); err != nil {
		return err
	}
	if err := ValidWebhookDeliveryID(t.ID); err != nil {
		return err
	}
	if err := ValidWebhookURL(t.URL); err != nil {
		return err
	}
	return t.Event.check(k, t.Tenant)
}

// check validates an event of tenant, in a message of kind k.
func (e *WebhookEvent) check(k, tenant string) error {
	d := e.Data
	if d.Tenant != tenant {
		return invalid(k, "event tenant %q is not the task's %q", d.Tenant, tenant)
	}
	switch e.Type {
	case WebhookJobFinished:
		if err := ValidJobID(d.JobID); err != nil {
			return err
		}
		if !Terminal(d.State) {
			return invalid(k, "job.finished state %q is not a final state", d.State)
		}
	case WebhookBatchFinished:
		if err := ValidBatchID(d.BatchID); err != nil {
			return err
		}
		if !BatchTerminal(d.State) {
			return invalid(k, "batch.finished state %q is not a final state", d.State)
		}
	default:
		return invalid(k, "event type %q is neither %s nor %s", e.Type, WebhookJobFinished, WebhookBatchFinished)
	}
	if d.BatchID != "" {
		if err := ValidBatchID(d.BatchID); err != nil {
			return err
		}
	}
	if len(d.Reason) > MaxWebhookReason {
		return invalid(k, "reason is %d bytes, at most %d", len(d.Reason), MaxWebhookReason)
	}
	if len(d.Links) > 4 {
		return invalid(k, "links holds %d entries, at most 4", len(d.Links))
	}
	for name, l := range d.Links {
		if len(name) > 16 || !strings.HasPrefix(l, "/v1/") || len(l) > 256 {
			return invalid(k, "link %q: %q is not an API path", name, l)
		}
	}
	return nil
}

// WebhookAttempt is one POST of a delivery.
type WebhookAttempt struct {
	// At is when the attempt started; DurationMS how long it took.
	At         time.Time `json:"at"`
	DurationMS int64     `json:"duration_ms"`
	// StatusCode is the receiver's HTTP status (absent when no response
	// came); Error why the attempt failed (absent for a 2xx).
	StatusCode int    `json:"status_code,omitempty"`
	Error      string `json:"error,omitempty"`
	// NextRetryAt is when the next attempt is due (absent when none is:
	// delivered, or given up).
	NextRetryAt *time.Time `json:"next_retry_at,omitempty"`
}

// WebhookDelivery is one event's delivery, in the webhooks bucket under
// <tenant>.<id>: where it goes, where it stands and every attempt.
type WebhookDelivery struct {
	Header
	// ID is the delivery id (the webhook-id header); Tenant owns it.
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Type is the event's type; JobID or BatchID what ended.
	Type    string `json:"type" jsonschema:"enum=job.finished,enum=batch.finished"`
	JobID   string `json:"job_id,omitempty"`
	BatchID string `json:"batch_id,omitempty"`
	// URL is where the event is POSTed.
	URL string `json:"url"`
	// State is pending (attempts remain), delivered (a 2xx answered) or
	// failed (the last attempt failed: given up).
	State string `json:"state" jsonschema:"enum=pending,enum=delivered,enum=failed"`
	// Attempts are the POSTs so far, oldest first.
	Attempts []WebhookAttempt `json:"attempts"`
	// CreatedAt is when the first attempt was made; UpdatedAt the last
	// change.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// MessageKind implements Message.
func (*WebhookDelivery) MessageKind() string { return KindWebhookDelivery }

// Validate implements Message.
func (d *WebhookDelivery) Validate() error {
	const k = KindWebhookDelivery
	if err := d.Header.check(k); err != nil {
		return err
	}
	if err := ValidTenant(d.Tenant); err != nil {
		return err
	}
	if err := ValidWebhookDeliveryID(d.ID); err != nil {
		return err
	}
	if err := ValidWebhookURL(d.URL); err != nil {
		return err
	}
	switch d.Type {
	case WebhookJobFinished:
		if err := ValidJobID(d.JobID); err != nil {
			return err
		}
	case WebhookBatchFinished:
		if err := ValidBatchID(d.BatchID); err != nil {
			return err
		}
	default:
		return invalid(k, "type %q is neither %s nor %s", d.Type, WebhookJobFinished, WebhookBatchFinished)
	}
	switch d.State {
	case WebhookPending, WebhookDelivered, WebhookFailed:
	default:
		return invalid(k, "state %q is not pending, delivered or failed", d.State)
	}
	if len(d.Attempts) > MaxWebhookAttempts {
		return invalid(k, "attempts holds %d entries, at most %d", len(d.Attempts), MaxWebhookAttempts)
	}
	for i, a := range d.Attempts {
		if a.DurationMS < 0 || a.StatusCode < 0 || a.StatusCode > 999 || len(a.Error) > MaxWebhookReason {
			return invalid(k, "attempt %d: duration_ms, status_code or error out of bounds", i)
		}
	}
	return nil
}

// WebhookView is a job's or batch's webhook as the API shows it: where
// it goes and how its delivery stands (pending with no attempts until
// the job or batch ends).
type WebhookView struct {
	// URL is where the event is POSTed.
	URL string `json:"url"`
	// ID is the delivery id (absent until the job or batch has ended).
	ID string `json:"id,omitempty"`
	// State is pending, delivered or failed.
	State string `json:"state" jsonschema:"enum=pending,enum=delivered,enum=failed"`
	// Attempts are the POSTs so far, oldest first.
	Attempts []WebhookAttempt `json:"attempts"`
}

// WebhookSecret is the answer to GET /v1/webhooks/secret: the key's
// tenant's signing secret.
type WebhookSecret struct {
	// Tenant is the key's tenant: the secret signs its deliveries only.
	Tenant string `json:"tenant"`
	// Secret is whsec_ and the base64 of the HMAC-SHA256 key
	// (docs/api.md, "Webhooks": how to verify a delivery).
	Secret string `json:"secret"`
}

// WebhookDeliveryList is the answer to GET /v1/webhooks/deliveries: the
// key's tenant's deliveries, newest first.
type WebhookDeliveryList struct {
	Deliveries []WebhookDelivery `json:"deliveries"`
}
