package providers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/ratelimit"
	"github.com/makerfleet/makerfleet/internal/throttle"
	"github.com/makerfleet/makerfleet/schemas"
)

// Router errors.
var (
	// ErrNoDeployment: no deployment in the registry serves the model (or
	// every one is disabled). It also matches llm.ErrProvider: the fleet's
	// configuration, not the request; the voter hands the sample back.
	ErrNoDeployment = errors.New("providers: no deployment serves the model")
	// ErrUnavailable: every deployment of the model is out (its breaker
	// open, its key missing). Returned inside an *llm.RetryLaterError
	// whose Delay is the time until the first may be tried again.
	ErrUnavailable = errors.New("providers: every deployment of the model is out")
)

// errBreakerOpen marks a deployment out for its failures (not its key).
var errBreakerOpen = errors.New("out")

// Source gives the deployments now and a channel closed at their next
// change (nil: they never change).
type Source func() ([]schemas.Deployment, <-chan struct{})

// StaticSource is a fixed list (a providers file, or one deployment from
// a voter's flags).
func StaticSource(ds []schemas.Deployment) Source {
	ds = slices.Clone(ds)
	return func() ([]schemas.Deployment, <-chan struct{}) { return ds, nil }
}

// MirrorSource is the registry as a started mirror (NewMirror) sees it. A
// record whose key is not its name is left out.
func MirrorSource(m *bus.Mirror[schemas.Deployment]) Source {
	return func() ([]schemas.Deployment, <-chan struct{}) {
		ch := m.Changed()
		all, _ := m.All()
		ds := make([]schemas.Deployment, 0, len(all))
		for k, d := range all {
			if k == d.Name {
				ds = append(ds, d)
			}
		}
		sortByName(ds)
		return ds, ch
	}
}

// Config configures a Router.
type Config struct {
	// Model is the voter's own model: what a request naming none asks.
	// Required.
	Model string
	// Source gives the deployments. Required.
	Source Source
	// Limiter shares each deployment's limits with every voter (nil: none;
	// the voter learns of limits from 429s alone).
	Limiter *ratelimit.Limiter
	// LLM is the template of every deployment's model client: its BaseURL,
	// APIKey and Model are the deployment's; OnResponse is the router's.
	LLM llm.Config
	// Keys finds the deployments' keys. Default: the environment and files.
	Keys KeySource
	// Cooldown is how long a failed deployment is out at first, doubling
	// while it keeps failing up to MaxCooldown. Defaults 5s and 2 min.
	Cooldown, MaxCooldown time.Duration
	// Logger receives the router's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the breakers' clock. Test hook; default time.Now.
	Now func() time.Time
}

// Router calls models through the deployments serving them (see the
// package comment). It implements the voter's Model. Safe for concurrent
// use.
type Router struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	at   <-chan struct{}        // the source's change channel when deps was built
	deps map[string]*deployment // by name
	by   map[string][]*deployment
	rr   atomic.Uint64 // spreads ties between deployments

	limitLog throttle.Every
}

// deployment is one deployment as this voter uses it.
type deployment struct {
	rec    schemas.Deployment
	client *llm.Client
	keyErr error // the key could not be found: never called
	br     *breaker
	sem    chan struct{} // nil: no bound of its own

	inFlight, calls, failures atomic.Int64
}

// NewRouter returns a router over cfg.Source.
func NewRouter(cfg Config) (*Router, error) {
	if strings.TrimSpace(cfg.Model) == "" || cfg.Source == nil {
		return nil, errors.New("providers: router needs a Model and a Source")
	}
	cfg.Cooldown = cmp.Or(cfg.Cooldown, DefaultCooldown)
	cfg.MaxCooldown = cmp.Or(cfg.MaxCooldown, DefaultMaxCooldown)
	if cfg.Cooldown < 0 || cfg.MaxCooldown < cfg.Cooldown {
		return nil, fmt.Errorf("providers: cooldown %s, max %s: want 0 < cooldown <= max", cfg.Cooldown, cfg.MaxCooldown)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Router{cfg: cfg, log: cfg.Logger, deps: map[string]*deployment{}, limitLog: throttle.Every{Interval: 10 * time.Second}}
	r.current()
	return r, nil
}

// Close releases the deployments' idle connections.
func (r *Router) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.deps {
		if d.client != nil {
			d.client.Close()
		}
	}
}

// current returns the deployments by model, rebuilt when the source
// changed: an unchanged record keeps its client and breaker.
func (r *Router) current() map[string][]*deployment {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by != nil {
		if r.at == nil {
			return r.by
		}
		select {
		case <-r.at:
		default:
			return r.by
		}
	}
	recs, ch := r.cfg.Source()
	deps := make(map[string]*deployment, len(recs))
	by := map[string][]*deployment{}
	for _, rec := range recs {
		if rec.Disabled {
			continue
		}
		d := r.deps[rec.Name]
		if d == nil || !sameRecord(d.rec, rec) {
			d = r.build(rec)
		}
		deps[rec.Name] = d
		by[rec.Model] = append(by[rec.Model], d)
	}
	for name, d := range r.deps {
		if deps[name] != d && d.client != nil {
			d.client.Close()
		}
	}
	r.at, r.deps, r.by = ch, deps, by
	return by
}

// sameRecord compares what a client is built from (not when it was set).
func sameRecord(a, b schemas.Deployment) bool {
	a.Header, b.Header = schemas.Header{}, schemas.Header{}
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// build makes rec's client; a missing key or a bad record leaves the
// deployment out, with the reason.
func (r *Router) build(rec schemas.Deployment) *deployment {
	d := &deployment{rec: rec, br: &breaker{base: r.cfg.Cooldown, ceiling: r.cfg.MaxCooldown}}
	if rec.Concurrency > 0 {
		d.sem = make(chan struct{}, rec.Concurrency)
	}
	key, err := r.cfg.Keys.Key(&rec)
	if err != nil {
		d.keyErr = err
		r.log.Error("deployment left out: its key is not on this voter", "deployment", rec.Name, "model", rec.Model, "err", err)
		return d
	}
	cfg := r.cfg.LLM
	cfg.BaseURL, cfg.APIKey, cfg.Model = rec.BaseURL, key, rec.Upstream()
	cfg.OnResponse = func(status int, h http.Header) { r.observe(rec.Name, status, h) }
	d.client, err = llm.New(cfg)
	if err != nil {
		d.keyErr = err
		r.log.Error("deployment left out", "deployment", rec.Name, "err", err)
	}
	return d
}

// observe turns what a reply says about the provider's limits into a
// hold every voter honours.
func (r *Router) observe(name string, status int, h http.Header) {
	if r.cfg.Limiter == nil {
		return
	}
	hold, ok := llm.ProviderHold(status, h, time.Now())
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.cfg.Limiter.Hold(ctx, name, hold); err != nil && r.limitLog.Allow() {
		r.log.Warn("cannot share a provider's rate-limit hold", "deployment", name, "hold", hold, "err", err)
	}
}

// Complete calls req.Model (the router's Model when empty) through the
// deployments serving it: the least busy first, the next on a failure
// of the deployment's own (see the package comment).
func (r *Router) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	model := cmp.Or(req.Model, r.cfg.Model)
	cands := r.current()[model]
	if len(cands) == 0 {
		return llm.Response{}, fmt.Errorf("%w: %w: %q (maker providers list)", llm.ErrProvider, ErrNoDeployment, model)
	}
	order, retryIn, outErr := r.order(cands, req.N > 1)
	if len(order) == 0 && !errors.Is(outErr, errBreakerOpen) {
		// No key on this voter for any of them: its configuration.
		return llm.Response{}, fmt.Errorf("%w: %w: %q: %w", llm.ErrProvider, ErrUnavailable, model, outErr)
	}
	if len(order) == 0 {
		return llm.Response{}, &llm.RetryLaterError{Delay: retryIn, Cause: fmt.Errorf("%w: %q: %w", ErrUnavailable, model, outErr)}
	}
	var errs []error
	for _, d := range order {
		// A half-open deployment's one trial call may be another's.
		if !d.br.allow(r.cfg.Now()) {
			continue
		}
		resp, err := r.call(ctx, d, req)
		switch {
		case err == nil:
			d.br.success()
			return resp, nil
		case ctx.Err() != nil || !deploymentFault(err):
			d.br.release()
			return resp, err
		case errors.Is(err, ratelimit.ErrTooLong):
			// Busy, not broken: the next deployment, no breaker.
			d.br.release()
		default:
			d.failures.Add(1)
			d.br.failure(r.cfg.Now(), err)
			r.log.Warn("deployment failed; taking it out for a while", "deployment", d.rec.Name, "model", model, "err", err)
		}
		errs = append(errs, fmt.Errorf("deployment %s: %w", d.rec.Name, err))
	}
	if len(errs) == 0 { // every one was taken meanwhile (trials)
		return llm.Response{}, &llm.RetryLaterError{Delay: retryIn, Cause: fmt.Errorf("%w: %q: trial calls in flight", ErrUnavailable, model)}
	}
	return llm.Response{}, errors.Join(errs...)
}

// deploymentFault reports whether a call's error is its deployment's (so
// another deployment may serve the request) rather than the request's.
func deploymentFault(err error) bool {
	return errors.Is(err, llm.ErrProvider) || errors.Is(err, llm.ErrRetryBudget) ||
		errors.Is(err, llm.ErrRetryLater) || errors.Is(err, ratelimit.ErrTooLong)
}

// order is the deployments a call may try now, the least busy first
// (ties spread round robin). With none, why and when the first is back.
func (r *Router) order(cands []*deployment, wantN bool) (order []*deployment, retryIn time.Duration, why error) {
	now := r.cfg.Now()
	retryIn = r.cfg.MaxCooldown
	for _, d := range cands {
		if d.keyErr != nil {
			if why == nil {
				why = d.keyErr
			}
			continue
		}
		if !d.br.usable(now) {
			st := d.br.state(now)
			why = fmt.Errorf("deployment %s %w until %s: %w", d.rec.Name, errBreakerOpen, st.until.Format(time.RFC3339), st.why)
			retryIn = min(retryIn, max(st.until.Sub(now), 100*time.Millisecond))
			continue
		}
		order = append(order, d)
	}
	if len(order) > 1 {
		start := int(r.rr.Add(1) % uint64(len(order)))
		order = append(order[start:], order[:start]...)
		slices.SortStableFunc(order, func(a, b *deployment) int { return cmp.Compare(a.inFlight.Load(), b.inFlight.Load()) })
		if wantN { // a call for n choices goes where one call gives them
			slices.SortStableFunc(order, func(a, b *deployment) int { return -cmp.Compare(boolInt(a.rec.SupportsN), boolInt(b.rec.SupportsN)) })
		}
	}
	return order, retryIn, why
}

// call makes one call on d: its slot, its fleet-wide reservation, the
// model call, the settlement.
func (r *Router) call(ctx context.Context, d *deployment, req llm.Request) (llm.Response, error) {
	if d.sem != nil {
		select {
		case d.sem <- struct{}{}:
			defer func() { <-d.sem }()
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
	}
	d.inFlight.Add(1)
	defer d.inFlight.Add(-1)
	d.calls.Add(1)
	lim := ratelimit.Limits{RPM: d.rec.RPM, TPM: d.rec.TPM}
	var res *ratelimit.Reservation
	if l := r.cfg.Limiter; l != nil && !lim.None() {
		rv, err := l.Reserve(ctx, d.rec.Name, lim, EstimateTokens(req))
		switch {
		case errors.Is(err, ratelimit.ErrTooLong):
			return llm.Response{}, err
		case err != nil:
			// Redis is out of reach: call anyway (the provider's own 429s
			// still pace this voter) rather than stop sampling.
			if r.limitLog.Allow() {
				r.log.Warn("fleet-wide limits unavailable; calling without them", "deployment", d.rec.Name, "err", err)
			}
		default:
			res = &rv
			if rv.Wait > 0 {
				t := time.NewTimer(rv.Wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					r.settle(d, res, 0, false)
					return llm.Response{}, ctx.Err()
				}
			}
		}
	}
	call := req
	call.Model = d.rec.Upstream()
	if call.N > 1 && !d.rec.SupportsN {
		// One choice; the caller draws the others alone (some servers
		// refuse n > 1 outright).
		call.N = 1
	}
	resp, err := d.client.Complete(ctx, call)
	if res != nil {
		r.settle(d, res, int64(resp.PromptTokens+resp.CompletionTokens), true)
	}
	return resp, err
}

func (r *Router) settle(d *deployment, res *ratelimit.Reservation, used int64, sent bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.cfg.Limiter.Settle(ctx, *res, used, sent); err != nil && r.limitLog.Allow() {
		r.log.Warn("cannot settle a fleet-wide reservation", "deployment", d.rec.Name, "err", err)
	}
}

// SupportsN reports whether a deployment serving model answers n > 1
// (the voter then asks a request's samples in one call).
func (r *Router) SupportsN(model string) bool {
	for _, d := range r.current()[model] {
		if d.rec.SupportsN && d.keyErr == nil {
			return true
		}
	}
	return false
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// EstimateTokens bounds what a call may use, for its reservation: its
// messages at four bytes a token plus a few per message, and its
// max_tokens (1024 when unset) for each of its n choices.
func EstimateTokens(req llm.Request) int64 {
	var n int64
	for _, m := range req.Messages {
		n += int64(len(m.Content))/4 + 4
	}
	out := int64(req.MaxTokens)
	if out <= 0 {
		out = 1024
	}
	return n + out*int64(max(req.N, 1))
}

// Status is one deployment as this voter sees it.
type Status struct {
	Name     string    `json:"name"`
	Model    string    `json:"model"`
	BaseURL  string    `json:"base_url"`
	State    string    `json:"state"` // ok, out, no_key
	Until    time.Time `json:"until,omitzero"`
	Reason   string    `json:"reason,omitempty"`
	InFlight int64     `json:"in_flight"`
	Calls    int64     `json:"calls"`
	Failures int64     `json:"failures"`
}

// Status lists the deployments this voter uses, by name.
func (r *Router) Status() []Status {
	r.current()
	r.mu.Lock()
	deps := make([]*deployment, 0, len(r.deps))
	for _, d := range r.deps {
		deps = append(deps, d)
	}
	r.mu.Unlock()
	now := r.cfg.Now()
	out := make([]Status, 0, len(deps))
	for _, d := range deps {
		s := Status{Name: d.rec.Name, Model: d.rec.Model, BaseURL: d.rec.BaseURL, State: "ok",
			InFlight: d.inFlight.Load(), Calls: d.calls.Load(), Failures: d.failures.Load()}
		if d.keyErr != nil {
			s.State, s.Reason = "no_key", d.keyErr.Error()
		} else if st := d.br.state(now); st.out {
			s.State, s.Until, s.Reason = "out", st.until, st.why.Error()
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Ready fails when no deployment can serve the router's own model now
// (none is listed, or each is out or has no key), naming why.
func (r *Router) Ready() error {
	var why []string
	for _, s := range r.Status() {
		if s.Model != r.cfg.Model {
			continue
		}
		if s.State == "ok" {
			return nil
		}
		why = append(why, s.Name+": "+s.Reason)
	}
	if len(why) == 0 {
		return fmt.Errorf("%w: %q", ErrNoDeployment, r.cfg.Model)
	}
	return fmt.Errorf("%w: %q: %s", ErrUnavailable, r.cfg.Model, strings.Join(why, "; "))
}
