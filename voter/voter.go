// Package voter is the stateless worker that draws MAKER samples.
//
// Consumes (names of the default namespace):
//   - sample requests (schemas.SampleRequest) from stream MAKER_SAMPLES
//     through the durable pull consumer "voters", which every voter shares:
//     adding voters adds sampling capacity. A voter reserves a slot before
//     it pulls, so it holds no request it is not working on;
//   - step-decided events (schemas.StepDecided) on core subject
//     maker.v1.decided.>, to skip queued samples of decided steps without
//     calling the model and to cancel calls in flight. A notice is taken
//     only for a step at most one beyond the highest this voter has seen
//     requested for its job and epoch; any other is logged and ignored
//     (see tracker).
//
// Produces:
//   - sample results (schemas.SampleResult) on maker.v1.result.<tenant>.<job>
//     (stream MAKER_RESULTS), each echoing its request's token (the
//     sample's capability, which only coordinators can make), with
//     Nats-Msg-Id = sample id + "/r/" + token + "/" + delivery
//     (schemas.ResultMsgID): one who never pulled the request cannot
//     publish under that id first and have the stream drop the honest
//     answer as a duplicate. The coordinator counts a result only if its
//     token is its sample's, and bounds its token counts by what the
//     request allows.
//
// For each request the voter first checks it against its own model
// Policy: a request naming a model, max_output_tokens or temperature the
// voter's configuration does not allow is logged and answered as the red
// flag "policy" without calling the model (a request is data: on a fleet
// without authorization anyone may have written it, and the model key is
// the voter's). Otherwise it builds the step's prompt from the task, calls
// the model once a sample (retries for 429, 5xx and timeouts live in the
// model client; a request asking several samples, SampleRequest.Also, is
// one call with n when the model answers n, see draw), and applies the
// red flags to each answer: finish_reason "length", more output
// tokens than the request allows, a reply the task's strict parser
// rejects, or no usable reply (no choice, no content, a body that is not a
// completion or usage out of range, after the client's
// BadResponseAttempts tries: "empty"). It answers with the canonical vote
// key or the red-flag reason, the token usage and the latency, and only
// then acks the request.
//
// The pull loop is a bus.Worker (slots, keep-alive, drain); handle's error
// is the message's fate: answered (a request the model refuses for good is
// answered as a red flag) → Ack, confirmed by the server; undecodable,
// unknown task, bad state, or a model failure on the last delivery allowed
// → bus.Drop: kept in the dead-letter stream, then TermWithReason; any
// other model failure, or a result that cannot be published →
// NakWithDelay, so another voter or a later attempt takes it. A sample
// handed back because the provider cannot serve it is also told to its
// job as an unserved result (never a sample), so the job's status says
// provider_unavailable.
package voter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/inputs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/lru"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/presence"
	"github.com/makerfleet/makerfleet/internal/sampling"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/throttle"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// Model is what the voter needs of a model client; *llm.Client has it.
type Model interface {
	Complete(ctx context.Context, req llm.Request) (llm.Response, error)
}

var _ Model = (*llm.Client)(nil)

// Config configures a Voter.
type Config struct {
	// ID names this voter in results. Default voter-host-pid.
	ID string
	// Tasks are the built-in tasks (required); the task specs requests name
	// come from the fleet's task registry.
	Tasks *task.Registry
	// SimHints sends the simulated model (internal/simllm) which task step
	// a request is (llm.SimHint), so it can answer task specs from their
	// reference. Off for real models. Default false.
	SimHints bool
	// Model names the model in results (the client decides what is called).
	Model string
	// SupportsN: the voter's model answers a call's n > 1 with n choices,
	// so a request asking several samples (schemas.SampleRequest.Also)
	// is drawn in one call (a model that says so itself, NModel, decides
	// instead). Default false: one call a sample.
	SupportsN bool
	// Concurrency is how many requests this voter holds at once, and how
	// many model calls it has in flight at most (a request may ask a
	// wave's samples: SampleRequest.Also). Default 8.
	Concurrency int
	// DrainTimeout is how long Run, once stopped, lets samples in hand
	// finish before cancelling them (they are then handed back). Default 30s.
	DrainTimeout time.Duration
	// ModelErrorDelay is how long a request whose model call failed waits
	// before redelivery, unless the server asked for longer. Default 2s.
	ModelErrorDelay time.Duration
	// ResultLinger is how long the answers of a request asking several
	// samples (a wave) wait, once one is ready, for the others, so they go
	// in one message: a wave asks what its step needs to decide, so the
	// step waits for them all anyway, while a message fewer is a publish,
	// a delivery, an ack and a Redis round trip fewer. A slow or hung call
	// holds the others back at most this long. Default
	// DefaultResultLinger (20ms); negative: none (each answer goes once
	// ready, with those ready together).
	ResultLinger time.Duration
	// Policy bounds the models, max_output_tokens and temperature a request
	// may ask for. Default: the voter's own model only, at most 4096
	// tokens, temperature 0 to 1.
	Policy Policy
	// Bus configures the streams when this voter creates them.
	Bus topology.Config
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the voter's metrics (internal/metrics): model
	// calls are timed and counted, results counted. Nil: none are kept
	// (and the presence record counts no provider errors).
	Metrics *metrics.Voter
	// Presence configures the voter's presence record
	// (schemas.VoterPresence, internal/presence): renewed every
	// Presence.Interval (default 5s) while it runs, deleted when it
	// stops. Its namespace is Bus.Namespace.
	Presence presence.Config
	// NoPresence: publish no presence record. Default false.
	NoPresence bool
	// Build is the release the presence record names (maker --version).
	Build string
	// Deployments, when set, lists the provider deployments the voter
	// calls, for its presence record.
	Deployments func() []string
}

// DefaultResultLinger is Config.ResultLinger's default: far below a model
// call's latency, and more than the spread of a wave's answers from a
// fast model on a busy machine (the 14-disk fleet bench: 7-13 % more
// steps/s than with none, docs/benchmarks.md).
const DefaultResultLinger = 20 * time.Millisecond

// MaxResultLinger bounds Config.ResultLinger: a hung call holds its
// siblings back at most this long.
const MaxResultLinger = time.Second

func (c *Config) defaults() error {
	if c.Tasks == nil {
		return fmt.Errorf("%w: Tasks is required", ErrConfig)
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("voter-%s-%d", host, os.Getpid())
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.Concurrency < 1 || c.Concurrency > 10_000 {
		return fmt.Errorf("%w: Concurrency must be between 1 and 10000, got %d", ErrConfig, c.Concurrency)
	}
	switch {
	case c.ResultLinger == 0:
		c.ResultLinger = DefaultResultLinger
	case c.ResultLinger < 0:
		c.ResultLinger = 0
	case c.ResultLinger > MaxResultLinger:
		return fmt.Errorf("%w: ResultLinger must be at most %s, got %s", ErrConfig, MaxResultLinger, c.ResultLinger)
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.ModelErrorDelay == 0 {
		c.ModelErrorDelay = 2 * time.Second
	}
	if c.DrainTimeout < 0 || c.ModelErrorDelay < 0 {
		return fmt.Errorf("%w: negative duration", ErrConfig)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c.Policy.defaults()
}

// Stats are a voter's counters since start.
type Stats struct {
	Requests    int64 `json:"requests"`
	ModelCalls  int64 `json:"model_calls"`
	Votes       int64 `json:"votes"`
	RedFlags    int64 `json:"red_flags"`
	Skipped     int64 `json:"skipped"`
	Cancelled   int64 `json:"cancelled"`
	ModelErrors int64 `json:"model_errors"`
	Malformed   int64 `json:"malformed"`
	HandedBack  int64 `json:"handed_back"`
	// PolicyRefused counts requests refused by the Policy (also red flags).
	PolicyRefused int64 `json:"policy_refused"`
	// BadReplies counts calls that ended with llm.ErrBadResponse (also
	// red flags).
	BadReplies int64 `json:"bad_replies"`
	// NoticesIgnored counts decided notices outside the tracker's window.
	NoticesIgnored int64 `json:"notices_ignored"`
	// ProviderRefusals counts calls the provider refused for the key or
	// the model (llm.ErrProvider: 401, 403, 404); their samples were
	// handed back, never answered (also model errors).
	ProviderRefusals int64 `json:"provider_refusals"`
}

// Voter pulls sample requests and answers them.
type Voter struct {
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	model   Model
	log     *slog.Logger
	decided *tracker
	tasks   *taskreg.Registry                 // set by Run, before any request is handled
	inputs  *inputs.Store                     // jobs' params by reference; set by Run
	insts   *lru.Cache[string, task.Instance] // task+params → bound instance

	requests, modelCalls, votes, redFlags, skipped, cancelled atomic.Int64
	modelErrors, malformed, handedBack                        atomic.Int64
	policyRefused, badReplies, noticesIgnored                 atomic.Int64
	maxDeliver                                                atomic.Int64 // the consumer's MaxDeliver
	providerRefusals                                          atomic.Int64
	inFlight                                                  atomic.Int64 // requests in hand
	started                                                   time.Time
	rate                                                      rateMeter                     // samples/s between presence records (presence.go)
	noticeLog                                                 throttle.Every                // spaces the ignored-notice log lines
	faultLog                                                  throttle.Every                // spaces the provider-refusal log lines
	faults                                                    faults                        // the provider refusing the key or a model (fault.go)
	unserved                                                  *lru.Cache[string, time.Time] // last unserved notice by job
	worker                                                    *bus.Worker                   // set by Run before any request is handled
	calls                                                     chan struct{}                 // a slot per model call in flight (Concurrency)
}

// New returns a Voter that calls model.
func New(nc *nats.Conn, model Model, cfg Config) (*Voter, error) {
	if nc == nil || model == nil {
		return nil, fmt.Errorf("%w: nil NATS connection or model", ErrConfig)
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("voter: jetstream: %w", err)
	}
	if cfg.Metrics != nil {
		model = timedModel{Model: model, met: cfg.Metrics, model: cfg.Model}
	}
	return &Voter{cfg: cfg, nc: nc, js: js, model: model, log: cfg.Logger.With("voter", cfg.ID), decided: newTracker(), started: time.Now().UTC(),
		calls: make(chan struct{}, cfg.Concurrency),
		insts: lru.New[string, task.Instance](maxInstances), unserved: lru.New[string, time.Time](maxInstances), noticeLog: throttle.Every{Interval: noticeLogEvery}, faultLog: throttle.Every{Interval: faultLogEvery}}, nil
}

// Stats returns the counters.
func (v *Voter) Stats() Stats {
	return Stats{
		Requests: v.requests.Load(), ModelCalls: v.modelCalls.Load(), Votes: v.votes.Load(),
		RedFlags: v.redFlags.Load(), Skipped: v.skipped.Load(), Cancelled: v.cancelled.Load(),
		ModelErrors: v.modelErrors.Load(), Malformed: v.malformed.Load(), HandedBack: v.handedBack.Load(),
		PolicyRefused: v.policyRefused.Load(), BadReplies: v.badReplies.Load(), NoticesIgnored: v.noticesIgnored.Load(),
		ProviderRefusals: v.providerRefusals.Load(),
	}
}

// Run works until ctx is done, then drains: it stops pulling, lets the
// samples in hand finish for up to DrainTimeout, cancels the rest (handing
// them back to the stream) and returns.
func (v *Voter) Run(ctx context.Context) error {
	topo, err := topology.Ensure(ctx, v.js, v.cfg.Bus)
	if err != nil {
		return err
	}
	v.tasks = taskreg.New(topo.Tasks, v.cfg.Tasks, taskspec.CompileSpec)
	v.inputs = inputs.New(topo.JS, topo.NS, inputs.Config{})
	cons, err := v.consumer(ctx)
	if err != nil {
		return err
	}
	sub, err := v.nc.Subscribe(v.cfg.Bus.Namespace.DecidedWildcard(), v.onDecided)
	if err != nil {
		return fmt.Errorf("voter: subscribe decided events: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	// Shutdown order: ctx done → stop pulling → samples in hand finish →
	// after DrainTimeout, cancel them → they are handed back (bus.Worker).
	w, err := bus.NewWorker(v.js, cons, v.traced(v.handle), bus.WorkerConfig{
		Recreate:    v.consumer,
		Concurrency: v.cfg.Concurrency,
		FetchWait:   pullWait,
		SoftStop:    v.cfg.DrainTimeout,
		RetryDelay:  v.cfg.ModelErrorDelay,
		// A lost ack would have the request sampled a second time, and
		// until the server has it the request still counts as held.
		DoubleAck:   true,
		DeadLetters: true,
		Namespace:   v.cfg.Bus.Namespace,
		Logger:      v.log,
	})
	if err != nil {
		return fmt.Errorf("voter: %w", err)
	}
	v.worker = w // handlers run only once w runs
	stopPresence := v.startPresence()
	defer stopPresence()
	v.log.Info("voter started", "concurrency", v.cfg.Concurrency, "model", v.cfg.Model, "allow_models", v.cfg.Policy.AllowModels,
		"max_tokens_ceiling", v.cfg.Policy.MaxTokensCeiling, "temperature_max", v.cfg.Policy.TemperatureMax)
	err = w.Run(ctx)
	v.log.Info("voter stopped", "stats", v.Stats())
	return err
}

// consumer returns the shared sample consumer, creating the topology
// (again) where it is missing.
func (v *Voter) consumer(ctx context.Context) (jetstream.Consumer, error) {
	topo, err := topology.Ensure(ctx, v.js, v.cfg.Bus)
	if err != nil {
		return nil, err
	}
	cons, err := v.js.Consumer(ctx, topo.NS.SamplesStream(), bus.ConsumerVoters)
	if err != nil {
		return nil, fmt.Errorf("voter: consumer: %w", err)
	}
	if info := cons.CachedInfo(); info != nil {
		v.maxDeliver.Store(int64(info.Config.MaxDeliver))
	}
	return cons, nil
}

// pullWait bounds one fetch; a fetch ends early once it has its requests.
// A stopping voter waits for its last fetch to end, so it is short: an
// idle voter sends one pull request a second.
const pullWait = time.Second

// handle answers one request; its error is the request's fate (see the
// package comment and bus.Worker).
func (v *Voter) handle(ctx context.Context, msg jetstream.Msg) error {
	v.requests.Add(1)
	v.inFlight.Add(1)
	defer v.inFlight.Add(-1)
	var req schemas.SampleRequest
	if err := schemas.Decode(msg.Data(), &req); err != nil {
		v.malformed.Add(1)
		v.log.Warn("dropping malformed sample request", "err", err)
		return bus.Drop(err, "malformed sample request")
	}
	if err := v.cfg.Policy.Check(&req, v.cfg.Model); err != nil {
		// Refused here, before the model: never sent with this voter's
		// key. Answered (not dead-lettered), so the step counts it and
		// draws another sample, and a step no voter may answer reaches its
		// sample cap instead of waiting for ever.
		v.policyRefused.Add(1)
		v.redFlags.Add(int64(1 + len(req.Also)))
		v.log.Warn("refusing a sample request outside this voter's model policy; the model is not called",
			"tenant", req.Tenant, "job", req.JobID, "sample", req.SampleID, "model", truncate(req.Model, 64),
			"max_output_tokens", req.MaxOutputTokens, "temperature", req.Temperature, "err", err)
		return v.replyAll(ctx, msg, &req, schemas.SampleResult{
			Outcome: schemas.OutcomeRedFlag, RedFlag: schemas.RedFlagPolicy, Detail: truncate(strings.TrimPrefix(err.Error(), "voter: "), 300),
		})
	}
	if v.decided.request(req.Tenant, req.JobID, req.Step, req.Epoch) {
		v.skipped.Add(int64(1 + len(req.Also)))
		return v.replyAll(ctx, msg, &req, schemas.SampleResult{Outcome: schemas.OutcomeSkipped})
	}
	inst, err := v.instance(ctx, &req)
	if errors.Is(err, errInputs) {
		v.log.Warn("cannot read a job's params yet; handing the sample back", "err", err, "sample", req.SampleID)
		return err
	}
	if err != nil {
		v.malformed.Add(1)
		v.log.Warn("dropping sample request for a task this voter cannot run", "err", err, "sample", req.SampleID)
		v.notifyRefused(ctx, msg, &req, err)
		return bus.Drop(err, "unknown task or params")
	}
	prompt, err := inst.Prompt(req.State)
	if err != nil {
		v.malformed.Add(1)
		v.log.Warn("dropping sample request with a bad state", "err", err, "sample", req.SampleID)
		v.notifyRefused(ctx, msg, &req, err)
		return bus.Drop(err, "bad state")
	}
	// A correlated step's decorrelated sample asks a paraphrase (the
	// variant is bounded by the request's Validate).
	if prompt, err = task.Paraphrase(prompt, req.PromptVariant); err != nil {
		v.malformed.Add(1)
		return bus.Drop(err, "bad prompt variant")
	}

	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	unregister := v.decided.register(req.Tenant, req.JobID, req.Step, req.Epoch, cancel)
	defer unregister()

	call := sampling.Request(prompt, req.Temperature, req.MaxOutputTokens, req.Seed, req.Model)
	if v.cfg.SimHints && req.TaskVersion != "" {
		call.Headers = llm.SimHint{Task: req.Task, Version: req.TaskVersion, Hash: req.TaskHash, Params: req.Params, ParamsRef: req.ParamsRef, State: req.State}.Headers()
	}
	members := req.Members()
	return v.answer(ctx, callCtx, cancel, msg, inst, members, call)
}

// maxInstances bounds the bound instances a voter keeps: far more than
// the jobs a fleet runs at once, and a stream of requests naming new
// params (forged or not) cannot grow it.
const maxInstances = 256

// errInputs: the inputs store did not answer; the request is handed back.
var errInputs = errors.New("voter: the inputs store did not answer")

// instance binds the request's task (a built-in, or the task spec version
// and hash the job pinned) and params once and caches it.
//
// Params by reference are keyed by their reference, not read: a step of a
// job with big params costs the same as one with small ones. Reading
// them fails with errInputs when the inputs store does not answer (the
// request is handed back to try again), and as a refused request when it
// does not hold them or they do not match their reference.
func (v *Voter) instance(ctx context.Context, req *schemas.SampleRequest) (task.Instance, error) {
	pkey := req.ParamsRef
	if pkey == "" {
		pkey = string(req.Params)
	}
	key := req.Task + "\x00" + req.TaskVersion + "\x00" + req.TaskHash + "\x00" + pkey
	if in, ok := v.insts.Get(key); ok {
		return in, nil
	}
	params := req.Params
	if req.ParamsRef != "" {
		b, err := v.inputs.Get(ctx, req.ParamsRef)
		switch {
		case errors.Is(err, inputs.ErrUnavailable):
			return nil, fmt.Errorf("%w: %w", errInputs, err)
		case err != nil:
			return nil, err
		}
		params = b
	}
	in, err := task.BindRef(ctx, v.tasks, task.Ref{Name: req.Task, Version: req.TaskVersion, Hash: req.TaskHash}, params)
	if err != nil {
		return nil, err
	}
	v.insts.Put(key, in)
	return in, nil
}

// onDecided records a decided step and cancels its calls in flight, if
// the notice is plausible (see tracker); others are counted and logged.
func (v *Voter) onDecided(m *nats.Msg) {
	var ev schemas.StepDecided
	if err := schemas.Decode(m.Data, &ev); err != nil {
		v.malformed.Add(1)
		return
	}
	if want := v.cfg.Bus.Namespace.DecidedSubject(ev.Tenant, ev.JobID); m.Subject != want {
		// The subject is what permissions check: a notice about another
		// job than its subject names is not the coordinator's.
		v.ignoreNotice(&ev, "the subject names another job", "subject", m.Subject)
		return
	}
	if ok, highest := v.decided.decide(ev.Tenant, ev.JobID, ev.Step, ev.Epoch); !ok {
		v.ignoreNotice(&ev, "the step is beyond the job's requested steps", "highest_requested_step", highest)
	}
}

// noticeLogEvery spaces the log lines of ignored notices: a flood of forged
// notices is counted in full (Stats) but logged once a second.
const noticeLogEvery = time.Second

// faultLogEvery spaces the log lines of a provider refusing the voter's
// key or model: every worker meets it, again and again, until it is fixed.
const faultLogEvery = 10 * time.Second

func (v *Voter) ignoreNotice(ev *schemas.StepDecided, why string, args ...any) {
	v.noticesIgnored.Add(1)
	if !v.noticeLog.Allow() {
		return
	}
	v.log.Warn("ignoring a step-decided notice: "+why,
		append([]any{"tenant", ev.Tenant, "job", ev.JobID, "step", ev.Step, "epoch", ev.Epoch, "ignored_so_far", v.noticesIgnored.Load()}, args...)...)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
