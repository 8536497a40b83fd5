package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
)

// DefaultTenant is the tenant of a client given none.
const DefaultTenant = schemas.DefaultTenant

// fleetWait bounds how long binding the fleet's streams and buckets
// retries while the server does not answer.
const fleetWait = 10 * time.Second

// Option configures a Client.
type Option func(*settings)

type settings struct {
	namespace  string
	tenant     string
	name       string
	intakeOnly bool
	auth       bus.Auth
	compile    task.Compiler
}

// WithNamespace sets the fleet's namespace on the server (its streams,
// buckets and subjects). Default "maker", the fleet every role joins
// unless told otherwise.
func WithNamespace(ns string) Option { return func(s *settings) { s.namespace = ns } }

// WithTenant sets the tenant of the jobs the client submits (unless a
// spec names its own) and of job ids given without one. Default
// DefaultTenant.
func WithTenant(tenant string) Option { return func(s *settings) { s.tenant = tenant } }

// WithIntakeOnly makes Submit only queue jobs on the fleet's job stream,
// where a coordinator registers them, and never create the fleet's
// streams: what a tenant's identity may do on a secured fleet. Such a
// client also cannot read the coordinators' leases (see QueuedReason).
// Default: Submit registers the job itself, creating the fleet's streams
// on a server that has none.
func WithIntakeOnly() Option { return func(s *settings) { s.intakeOnly = true } }

// WithTaskSpecs makes the client compile task specs with c
// (task/spec.CompileSpec), so that a job or batch line naming a
// registered spec is checked completely, params included, before it is
// sent, and Tasks can load specs. Default: the client links no spec
// language (no CEL); it checks built-in tasks completely and pins a task
// spec (its version and hash), and the coordinator that takes the job
// checks its params, failing the job with the reason when they do not
// fit.
func WithTaskSpecs(c task.Compiler) Option { return func(s *settings) { s.compile = c } }

// WithName sets the connection's name in the server's monitoring (Dial
// only). Default "makerfleet-client".
func WithName(name string) Option { return func(s *settings) { s.name = name } }

// WithNKey authenticates with an nkey seed file, as `maker auth init`
// writes them (Dial only). Its file name without extension is the
// identity, under whose inbox replies arrive, unless WithIdentity says
// otherwise. Default none.
func WithNKey(seedFile string) Option { return func(s *settings) { s.auth.NKey = seedFile } }

// WithCreds authenticates with a JWT user credentials file (Dial only).
// Default none.
func WithCreds(file string) Option { return func(s *settings) { s.auth.Creds = file } }

// WithIdentity sets the identity the connection's replies are addressed
// to, _INBOX.<identity> (Dial only). Default: the nkey or creds file's
// name, else none.
func WithIdentity(identity string) Option { return func(s *settings) { s.auth.Identity = identity } }

// WithTLS sets a client certificate and key for mutual TLS, and the CA
// that signed the server's certificate (Dial only; any may be empty).
// Default: TLS only if the URL is tls:// or the server requires it,
// verified against the system's roots.
func WithTLS(certFile, keyFile, caFile string) Option {
	return func(s *settings) { s.auth.TLSCert, s.auth.TLSKey, s.auth.TLSCA = certFile, keyFile, caFile }
}

// Client submits and watches a fleet's jobs and batches. It is safe for
// concurrent use.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	own     bool // Dial made nc: Close closes it
	cfg     topology.Config
	tenant  string
	intake  bool
	builtin *task.Registry
	compile task.Compiler // nil: specs are pinned, not compiled
	closed  atomic.Bool

	mu   sync.Mutex
	topo *topology.Topology // bound on first use
}

// Dial connects to the NATS server at url (several separated by commas)
// and returns a client that owns the connection: Close closes it. It does
// not check that the server holds a fleet; the first call that needs one
// does (ErrNoFleet).
func Dial(ctx context.Context, url string, opts ...Option) (*Client, error) {
	s, err := collect(opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.name == "" {
		s.name = "makerfleet-client"
	}
	nc, err := bus.Connect(url, s.name, s.auth)
	if err != nil {
		return nil, err
	}
	c, err := newClient(nc, s)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.own = true
	return c, nil
}

// New returns a client on nc, a connection the caller owns and closes
// (after the client's calls have returned). The Dial-only options are
// ignored.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrInvalid)
	}
	s, err := collect(opts)
	if err != nil {
		return nil, err
	}
	return newClient(nc, s)
}

// collect applies opts and checks them.
func collect(opts []Option) (settings, error) {
	var s settings
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if s.tenant == "" {
		s.tenant = DefaultTenant
	}
	if err := schemas.ValidTenant(s.tenant); err != nil {
		return s, &clientError{sentinel: ErrInvalid, err: err}
	}
	if err := bus.Namespace(s.namespace).Validate(); err != nil {
		return s, &clientError{sentinel: ErrInvalid, err: err}
	}
	if err := s.auth.Validate(); err != nil {
		return s, &clientError{sentinel: ErrInvalid, err: err}
	}
	return s, nil
}

func newClient(nc *nats.Conn, s settings) (*Client, error) {
	ns := bus.Namespace(s.namespace)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Client{
		nc: nc, js: js, cfg: topology.Config{Namespace: ns}, tenant: s.tenant, intake: s.intakeOnly,
		builtin: builtin.Registry(), compile: s.compile,
	}, nil
}

// Tenant returns the client's tenant.
func (c *Client) Tenant() string { return c.tenant }

// Close closes the connection if Dial made it. Calls made after Close
// fail with ErrClosed.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.own {
		c.nc.Close()
	}
	return nil
}

// CheckFleet binds the fleet's streams and buckets: ErrNoFleet when the
// server holds none (in the client's namespace). It creates nothing.
func (c *Client) CheckFleet(ctx context.Context) error {
	_, err := c.topology(ctx)
	return err
}

// topology binds the fleet's streams and buckets once, creating nothing.
func (c *Client) topology(ctx context.Context) (*topology.Topology, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.topo != nil {
		return c.topo, nil
	}
	cfg := c.cfg
	cfg.StartupWait = fleetWait
	topo, err := topology.Open(ctx, c.js, cfg)
	if err != nil {
		return nil, wrap(err)
	}
	c.topo = topo
	return topo, nil
}

// Tasks pins and loads tasks: the built-in ones and the task specs
// registered with the fleet. Programs building a job spec use it to find a
// task's steps (task.BindRef) before they submit.
type Tasks interface {
	task.Source
	// Resolve pins name at version (the latest registered when ""): a
	// built-in's name, or a spec's name, version and hash.
	Resolve(ctx context.Context, name, version string) (task.Ref, error)
}

// Tasks returns the fleet's task registry; on a server without a fleet,
// the built-in tasks alone. Without WithTaskSpecs it resolves a spec (pins
// its version and hash) but does not load it: Task returns an error saying
// this program does not compile task specs.
func (c *Client) Tasks(ctx context.Context) (Tasks, error) {
	topo, err := c.topology(ctx)
	switch {
	case errors.Is(err, ErrNoFleet):
		return taskreg.New(nil, c.builtin, c.compile), nil
	case err != nil:
		return nil, err
	}
	return taskreg.New(topo.Tasks, c.builtin, c.compile), nil
}

// ref reads a job (or batch, with schemas.ValidBatchID) id: "id" in the
// client's tenant, or "tenant/id".
func (c *Client) ref(id string, valid func(string) error) (tenant, job string, err error) {
	tenant, job = c.tenant, id
	if t, j, ok := strings.Cut(id, "/"); ok {
		tenant, job = t, j
	}
	if err := schemas.ValidTenant(tenant); err != nil {
		return "", "", &clientError{sentinel: ErrInvalid, err: err}
	}
	if err := valid(job); err != nil {
		return "", "", &clientError{sentinel: ErrInvalid, err: err}
	}
	return tenant, job, nil
}
