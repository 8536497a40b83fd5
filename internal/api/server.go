package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/inputs"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/internal/quota"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// Authenticator checks a request's API key: *apikey.Store. A malformed,
// unknown or revoked key is apikey.ErrUnauthorized.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (apikey.Principal, error)
}

var _ Authenticator = (*apikey.Store)(nil)

// Quotas reads (from a cache) and writes tenants' quotas: *quota.Store.
type Quotas interface {
	Get(ctx context.Context, tenant string) (schemas.TenantQuota, error)
	Set(ctx context.Context, q schemas.TenantQuota) (schemas.TenantQuota, error)
}

// Forecaster is the planner's forecast of a prepared job (spec defaults
// applied, task bound) for a tenant with quota q, at the prices of the
// fleet's table: pricing.Forecast.
type Forecaster func(spec schemas.JobSpec, inst task.Instance, q schemas.TenantQuota, prices pricing.Table) schemas.Forecast

var _ Forecaster = pricing.Forecast

// Deps are what the server acts on. NC, Topo, Tasks and Auth are required.
type Deps struct {
	// NC is the server's NATS connection; Topo the fleet's topology bound
	// on it (topology.Open).
	NC   *nats.Conn
	Topo *topology.Topology
	// Tasks are the built-in tasks (task/builtin.Registry()); registered
	// specs are read from Topo.Tasks.
	Tasks *task.Registry
	// Auth checks API keys (*apikey.Store, started).
	Auth Authenticator
	// Quotas serves the quota routes and the usage's quota (nil: quota
	// routes answer 501).
	Quotas Quotas
	// Forecast makes a job's forecast at submit, and pricing.Admit refuses a
	// budget_usd below its low end (nil: no forecast, no admission).
	Forecast Forecaster
	// Batches serves the batch routes (nil: they answer 501).
	Batches Batches
	// Budgets holds the jobs' and tenants' budgets in Redis
	// (*store.Budgets): the usage's spend and the job budget routes (nil:
	// the usage shows no spend and the budget routes answer 501).
	Budgets Budgets
	// Inflight counts a tenant's samples in flight for the usage
	// (*store.Limiter; nil: 0).
	Inflight Inflight
	// WebhookSecret is a tenant's webhook signing secret, whsec_...
	// (webhook.Secret of webhook.TenantKey; nil: GET /v1/webhooks/secret
	// answers 501).
	WebhookSecret func(tenant string) string
	// Prices is the fleet's price table (*pricetable.Cache, started): submits
	// and budgets are checked against it, forecasts priced at it (nil:
	// each read asks Topo.Prices).
	Prices Prices
}

// Prices is the fleet's price table now: *pricetable.Cache.
type Prices interface {
	Current(ctx context.Context) (pricing.Table, error)
}

var _ Prices = (*pricetable.Cache)(nil)

// Budgets reads and sets budgets: *store.Budgets.
type Budgets interface {
	TenantDay(ctx context.Context, tenant, day string) (store.Account, error)
	Job(ctx context.Context, job store.JobRef) (store.Account, error)
	SetJobLimit(ctx context.Context, job store.JobRef, limit pricing.Nano) error
}

var _ Budgets = (*store.Budgets)(nil)

// Inflight counts a tenant's sample requests in flight and its jobs
// holding running-job slots: *store.Limiter.
type Inflight interface {
	InFlight(ctx context.Context, tenant string) (int, error)
	Running(ctx context.Context, tenant string) (int, error)
}

var (
	_ Inflight = (*store.Limiter)(nil)
	_ Quotas   = (*quota.Store)(nil)
)

// Config sets the server's limits. Zero fields take the defaults.
type Config struct {
	// MaxBodyBytes bounds a JSON request body (413 above). Default 1 MiB.
	MaxBodyBytes int64
	// MaxJobBytes bounds a job's body (POST /v1/jobs), whose params may
	// be as large as the fleet keeps (schemas.MaxParamsBytes). Default
	// that and 64 KiB for the rest.
	MaxJobBytes int64
	// MaxTaskBytes bounds a task spec's body. Default 1 MiB.
	MaxTaskBytes int64
	// MaxBatchBytes bounds a batch's JSONL body. Default 256 MiB.
	MaxBatchBytes int64
	// MaxTenantBatchBytes bounds the bytes of lines one tenant's open
	// batches hold together in the batch stream every tenant shares (429
	// above; batch.CreateOptions.MaxOpenBytes). Default 512 MiB.
	MaxTenantBatchBytes int64
	// RatePerSec and Burst are a key's request rate limit when the key
	// sets none. Default 20 per second, burst 40.
	RatePerSec float64
	Burst      int
	// ListLimit is a job listing's page size when ?limit= is not given;
	// MaxListLimit the largest ?limit=. Default 50 and 500.
	ListLimit, MaxListLimit int
	// Heartbeat is the time between SSE pings (": ping"); each ping and
	// event re-checks the stream's key, so a revoked key's stream ends
	// within a Heartbeat. Default 15s.
	Heartbeat time.Duration
	// MaxStreamsPerKey bounds one API key's event streams open at once
	// (429 above), MaxStreamsPerTenant all of one tenant's keys' (429
	// above); MaxStreams all of this server's (503 above). Default 8, 32
	// and 1000.
	MaxStreamsPerKey, MaxStreamsPerTenant, MaxStreams int
	// StreamWriteTimeout bounds each write of an event stream or a batch
	// file: a client that stops reading for that long is cut off. Default
	// 60s.
	StreamWriteTimeout time.Duration
	// RequestTimeout bounds a request's reads and writes of the fleet
	// (not an event stream's or a batch output's). Default 30s.
	RequestTimeout time.Duration
	// AskTimeout bounds a control or decide request to the coordinators.
	// Default 10s.
	AskTimeout time.Duration
	// BatchReadTimeout bounds reading a batch's body (a JSON body's read is
	// bounded by RequestTimeout): a client that sends too slowly is cut
	// off. Default 10m.
	BatchReadTimeout time.Duration
	// Logger receives failed requests (500s). Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) defaults() {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxBodyBytes, 1<<20)
	def(&c.MaxJobBytes, schemas.MaxParamsBytes+64<<10)
	def(&c.MaxTaskBytes, 1<<20)
	def(&c.MaxBatchBytes, 256<<20)
	def(&c.MaxTenantBatchBytes, batch.DefaultMaxOpenBytes)
	if c.RatePerSec == 0 {
		c.RatePerSec = 20
	}
	if c.Burst == 0 {
		c.Burst = 40
	}
	if c.ListLimit == 0 {
		c.ListLimit = 50
	}
	if c.MaxListLimit == 0 {
		c.MaxListLimit = 500
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.MaxStreamsPerKey == 0 {
		c.MaxStreamsPerKey = 8
	}
	if c.MaxStreamsPerTenant == 0 {
		c.MaxStreamsPerTenant = 32
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 1000
	}
	if c.StreamWriteTimeout == 0 {
		c.StreamWriteTimeout = time.Minute
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.AskTimeout == 0 {
		c.AskTimeout = 10 * time.Second
	}
	if c.BatchReadTimeout == 0 {
		c.BatchReadTimeout = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server is the HTTP API. It is an http.Handler.
type Server struct {
	deps  Deps
	cfg   Config
	tasks *taskreg.Registry
	// inputs keeps big params by reference (jobs.Externalize).
	inputs *inputs.Store
	mux    *http.ServeMux
	rate   *limiters
	// streams counts the event streams open, per key and in all.
	streams *streamSlots
	log     *slog.Logger

	// closing is closed by CloseStreams: event streams end.
	closing   chan struct{}
	closeOnce sync.Once
}

// CloseStreams ends every event stream in progress and any started later
// (for http.Server.RegisterOnShutdown: a stream would otherwise hold the
// shutdown until its job ends).
func (s *Server) CloseStreams() { s.closeOnce.Do(func() { close(s.closing) }) }

var _ http.Handler = (*Server)(nil)

// New returns the API server over deps.
func New(deps Deps, cfg Config) (*Server, error) {
	cfg.defaults()
	switch {
	case deps.NC == nil || deps.Topo == nil:
		return nil, errors.New("api: no NATS connection or topology")
	case deps.Tasks == nil:
		return nil, errors.New("api: no built-in tasks")
	case deps.Auth == nil:
		return nil, errors.New("api: no authenticator")
	case cfg.MaxBodyBytes < 0 || cfg.MaxJobBytes < 0 || cfg.MaxBatchBytes < 0 || cfg.MaxTenantBatchBytes < 0 || cfg.MaxTaskBytes < 0 || cfg.RatePerSec < 0 || cfg.Burst < 0 ||
		cfg.ListLimit < 1 || cfg.MaxListLimit < cfg.ListLimit || cfg.Heartbeat < 0 ||
		cfg.MaxStreamsPerKey < 0 || cfg.MaxStreamsPerTenant < 0 || cfg.MaxStreams < 0 || cfg.StreamWriteTimeout < 0:
		return nil, fmt.Errorf("api: invalid config %+v", cfg)
	}
	s := &Server{
		deps: deps, cfg: cfg, tasks: taskreg.New(deps.Topo.Tasks, deps.Tasks, taskspec.CompileSpec),
		inputs: inputs.New(deps.Topo.JS, deps.Topo.NS, inputs.Config{}),
		mux:    http.NewServeMux(), rate: newLimiters(cfg.RatePerSec, cfg.Burst), log: cfg.Logger,
		streams: newStreamSlots(cfg.MaxStreamsPerKey, cfg.MaxStreamsPerTenant, cfg.MaxStreams),
		closing: make(chan struct{}),
	}
	paths := map[string][]string{}
	var order []string
	for _, rt := range s.routes() {
		s.mux.Handle(rt.method+" "+rt.path, s.wrap(rt))
		if _, ok := paths[rt.path]; !ok {
			order = append(order, rt.path)
		}
		paths[rt.path] = append(paths[rt.path], rt.method)
	}
	// Any other method on a known path is a 405 naming the allowed ones;
	// any other path a 404: both as problems.
	for _, p := range order {
		methods := paths[p]
		if slices.Contains(methods, http.MethodGet) {
			methods = append(methods, http.MethodHead)
		}
		allow := strings.Join(methods, ", ")
		s.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			pe := problem(TypeMethodNotAllowed, "%s is not allowed here; allowed: %s", r.Method, allow)
			pe.allow = allow
			writeProblem(w, r, pe)
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, problem(TypeNotFound, "no such route: %s %s", r.Method, r.URL.Path))
	})
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// handler serves one route for principal p; an error is answered as a
// problem (asProblem).
type handler func(w http.ResponseWriter, r *http.Request, p apikey.Principal) error

// access is who may use a route.
type access int

const (
	// public routes need no key.
	public access = iota
	// tenant routes need a key; they act for its tenant.
	tenant
	// admin routes need an admin key (403 for another key).
	admin
)

// wrap makes rt's handler an http.Handler: panics recovered, the key
// checked, the key's rate limit applied, errors answered as problems.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("api: handler panic", "route", rt.method+" "+rt.path, "panic", v, "stack", string(debug.Stack()))
				writeProblem(w, r, problem(TypeInternal, "the server failed to answer this request"))
			}
		}()
		if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
			writeProblem(w, r, problem(TypeBadRequest, "the query string does not parse: %v", err))
			return
		}
		var p apikey.Principal
		if rt.access != public {
			var err error
			if p, err = s.authenticate(r); err != nil {
				writeProblem(w, r, err)
				return
			}
			if pe := s.rate.allow(p); pe != nil {
				writeProblem(w, r, pe)
				return
			}
			if rt.access == admin && !p.Admin {
				writeProblem(w, r, problem(TypeForbidden, "this route needs an admin key"))
				return
			}
		}
		if rt.body != nil {
			// A body sent too slowly is cut off; its read fails.
			d := s.cfg.RequestTimeout
			if rt.longBody {
				d = s.cfg.BatchReadTimeout
			}
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		if err := rt.h(w, r, p); err != nil {
			pe := asProblem(err)
			if pe.p.Status >= 500 && !errors.As(err, new(*problemError)) {
				s.log.Error("api: request failed", "route", rt.method+" "+rt.path, "tenant", p.Tenant, "key_id", p.KeyID, "err", err)
			}
			writeProblem(w, r, pe)
		}
	})
}

// authenticate reads the request's bearer key and returns its principal.
func (s *Server) authenticate(r *http.Request) (apikey.Principal, error) {
	h := r.Header.Get("Authorization")
	scheme, key, ok := strings.Cut(h, " ")
	if h == "" {
		return apikey.Principal{}, problem(TypeUnauthorized, "send an API key: Authorization: Bearer KEY")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return apikey.Principal{}, problem(TypeUnauthorized, "the Authorization header must be Bearer KEY")
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	p, err := s.deps.Auth.Authenticate(ctx, strings.TrimSpace(key))
	switch {
	case errors.Is(err, apikey.ErrUnauthorized):
		return apikey.Principal{}, problem(TypeUnauthorized, "unknown or revoked API key")
	case err != nil:
		s.log.Error("api: authenticate", "err", err)
		return apikey.Principal{}, problem(TypeUnavailable, "the API keys could not be read; try again")
	}
	return p, nil
}

// timeout is ctx bounded by the request timeout.
func (s *Server) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}
