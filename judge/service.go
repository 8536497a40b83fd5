package judge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// Config configures a judge Service. Zero fields take the documented
// defaults.
type Config struct {
	// Namespace of the fleet; "" is bus.DefaultNamespace.
	Namespace bus.Namespace
	// Storage of the judge's streams and buckets when this judge creates
	// them. Default jetstream.FileStorage.
	Storage jetstream.StorageType
	// Settings are the panels, prices and limits. Zero: DefaultSettings.
	// Missing fields are filled with their defaults.
	Settings Settings
	// BaseURL is the default OpenAI-compatible endpoint: every model
	// without its own base_url lives there. Required unless every model
	// (or the pass-through endpoint) names one.
	BaseURL string
	// APIKey is the default endpoint's key (optional).
	APIKey string
	// Concurrency is how many requests one judge handles at once. Default 4.
	Concurrency int
	// SoftStop is how long Stop lets requests in flight finish before
	// cancelling them. Default 30s.
	SoftStop time.Duration
	// Logger receives the judge's logs (keys redacted). Default: discard.
	Logger *slog.Logger
	// Getenv reads the api_key_env variables. Default os.Getenv.
	Getenv func(string) string
	// NewCompleter builds a model client for an endpoint. Default: an
	// internal/llm client with Settings.MaxAttempts attempts.
	NewCompleter func(Endpoint, *Settings) (Completer, error)
}

// Service is one judge replica. Start it once; Stop it once.
type Service struct {
	js     jetstream.JetStream
	cfg    Config
	s      *Settings
	topo   *bus.JudgeTopology
	models *models
	log    *slog.Logger

	mu       sync.Mutex
	worker   *bus.Worker // set by Start
	stopped  bool
	stopOnce sync.Once
}

// New validates cfg, ensures the judge's topology and returns a Service
// ready to Start.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	if cfg.SoftStop == 0 {
		cfg.SoftStop = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.NewCompleter == nil {
		cfg.NewCompleter = newLLMClient
	}
	if cfg.Concurrency < 1 || cfg.SoftStop < 0 {
		return nil, fmt.Errorf("%w: concurrency %d, soft stop %s", ErrConfig, cfg.Concurrency, cfg.SoftStop)
	}
	s, err := cfg.Settings.WithDefaults()
	if err != nil {
		return nil, err
	}
	ms := &models{s: &s, baseURL: cfg.BaseURL, apiKey: cfg.APIKey, getenv: cfg.Getenv, newC: cfg.NewCompleter,
		clients: make(map[string]Completer)}
	if err := ms.reachable(); err != nil {
		return nil, err
	}
	topo, err := bus.EnsureJudge(ctx, js, bus.JudgeConfig{Namespace: cfg.Namespace, Storage: cfg.Storage})
	if err != nil {
		return nil, err
	}
	return &Service{js: js, cfg: cfg, s: &s, topo: topo, log: cfg.Logger, models: ms}, nil
}

// Start begins pulling requests; it returns at once. ctx bounds the
// handlers (ending it is a hard stop); Stop is the graceful one.
func (sv *Service) Start(ctx context.Context) error {
	cons, err := sv.consumer(ctx)
	if err != nil {
		return err
	}
	w, err := bus.NewWorker(sv.js, cons, sv.process, bus.WorkerConfig{
		Recreate:    sv.consumer,
		Concurrency: sv.cfg.Concurrency,
		SoftStop:    sv.cfg.SoftStop,
		RetryDelay:  2 * time.Second,
		DoubleAck:   true,
		Redact:      Redact,
		Logger:      sv.log,
	})
	if err != nil {
		return fmt.Errorf("judge: %w", err)
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	switch {
	case sv.worker != nil:
		return errors.New("judge: already started")
	case sv.stopped:
		return errors.New("judge: stopped")
	}
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("judge: %w", err)
	}
	sv.worker = w
	return nil
}

// consumer returns the consumer every judge pulls from, creating the
// judge's topology (again) where it is missing.
func (sv *Service) consumer(ctx context.Context) (jetstream.Consumer, error) {
	if _, err := bus.EnsureJudge(ctx, sv.js, bus.JudgeConfig{Namespace: sv.cfg.Namespace, Storage: sv.cfg.Storage}); err != nil {
		return nil, err
	}
	cons, err := sv.js.Consumer(ctx, sv.topo.NS.JudgeStream(), bus.ConsumerJudges)
	if err != nil {
		return nil, fmt.Errorf("judge: consumer: %w", err)
	}
	return cons, nil
}

// Stop stops fetching, lets requests in flight finish for up to SoftStop,
// then cancels them (they are redelivered to another judge), and waits.
// Shutdown order: fetch loop, handlers, model clients.
func (sv *Service) Stop() {
	sv.stopOnce.Do(func() {
		sv.mu.Lock()
		sv.stopped = true
		w := sv.worker
		sv.mu.Unlock()
		if w != nil {
			w.Stop()
		}
		sv.models.close()
	})
}

// process handles one request; its error is the message's fate
// (bus.Worker): answered, or refused (a refusal is a stored response) →
// acked, confirmed by the server; unreadable → terminated; the bus failed
// → handed back after 2s, so another judge retries (at once when this one
// stops). The worker also keeps the message while the panel works, and
// turns a panic into a retry.
func (sv *Service) process(ctx context.Context, msg jetstream.Msg) error {
	var req schemas.BreakGlassRequest
	if err := schemas.Decode(msg.Data(), &req); err != nil {
		sv.log.Warn("judge: unreadable request", "err", Redact(err.Error()))
		return bus.Drop(err, clip(err.Error(), 200))
	}
	if err := sv.handle(ctx, &req); err != nil {
		sv.log.Warn("judge: request will be retried", "request", req.RequestID, "err", Redact(err.Error()))
		return err
	}
	return nil
}

// call is one request in progress.
type call struct {
	req      *schemas.BreakGlassRequest
	resp     *schemas.BreakGlassResponse
	audit    schemas.BreakGlassAudit
	approver string
}

// handle runs the gates and the panel for req and stores the response. An
// error means the bus failed (retry); every refusal is a stored response.
func (sv *Service) handle(ctx context.Context, req *schemas.BreakGlassRequest) error {
	// A redelivered request that was already answered is done.
	if prev, err := sv.answer(ctx, req.RequestID); err != nil {
		return err
	} else if prev != nil && schemas.FinalBreakGlassOutcome(prev.Outcome) {
		return nil
	}
	c := &call{req: req, resp: &schemas.BreakGlassResponse{
		Header:    schemas.NewHeader(schemas.KindBreakGlassResponse),
		RequestID: req.RequestID, Tenant: req.Tenant, Session: req.Session,
		Alternatives: []string{}, Risks: []string{},
		Solution:      schemas.Solution{FilesToChange: []string{}, CodeSnippets: map[string]string{}},
		PanelAnalysis: emptyAnalysis(),
	}}
	c.audit = schemas.BreakGlassAudit{RequestID: req.RequestID, Tenant: req.Tenant, Session: req.Session,
		Requester: req.Requester, Problem: req.Problem}
	c.resp.Cost.BudgetUSD = req.BudgetUSD
	if c.resp.Cost.BudgetUSD == 0 {
		c.resp.Cost.BudgetUSD = sv.s.DefaultBudgetUSD
	}
	c.resp.ExcludedFiles = req.ExcludedFiles

	// Gates that need nothing but the request.
	if req.ParentRequestID != "" {
		return sv.finish(ctx, c, schemas.BreakGlassRefused, "recursion guard: a request made from inside a panel (parent "+req.ParentRequestID+") cannot open another panel")
	}
	if !HasTrigger(req.Problem) {
		return sv.finish(ctx, c, schemas.BreakGlassRefused, `missing trigger: the problem must start with "break glass:" followed by the problem statement`)
	}
	if missing := MissingAttempts(req); len(missing) > 0 {
		return sv.finish(ctx, c, schemas.BreakGlassRefused, "prior attempts missing: break glass only after a local model, a single frontier model and the existing tools have failed on the same problem; not recorded: "+strings.Join(missing, ", "))
	}

	typ, source := Classify(req)
	c.resp.ProblemType, c.resp.TypeSource = typ, source
	panel, judgeModel := sv.s.Panel(typ), sv.s.JudgeModel
	if len(req.Plugins) == 1 {
		if p := req.Plugins[0]; len(p.AnalysisModels) > 0 {
			panel = append([]string(nil), p.AnalysisModels...)
		}
		if m := req.Plugins[0].Model; m != "" {
			judgeModel = m
		}
	}
	c.resp.Panel, c.resp.JudgeModel = panel, judgeModel
	c.resp.Mode = "panel"
	if sv.s.Passthrough != nil {
		c.resp.Mode = "passthrough"
	}

	history, err := sv.history(ctx, req)
	if err != nil {
		return err
	}
	a := Assemble(req, typ, history, sv.s)
	c.resp.ExcludedFiles = a.Excluded
	estimate := sv.s.Estimate(a, req, typ, panel, judgeModel)
	c.resp.Cost.EstimateUSD = estimate

	// The cost gate, with approval.
	approved, err := sv.approved(ctx, c)
	if err != nil {
		return err
	}
	if approved == schemas.ApprovalDenied {
		return nil // Deny wrote the final response and the audit record
	}
	switch decision, reason := sv.s.Gate(typ, estimate, c.resp.Cost.BudgetUSD, approved == schemas.ApprovalApproved); decision {
	case GateRefuse:
		return sv.finish(ctx, c, schemas.BreakGlassRefused, reason)
	case GateHold:
		return sv.hold(ctx, c, reason+" (maker judge approve "+req.RequestID+")")
	}

	// Session limits, atomically across replicas.
	key := bus.JudgeSessionKey(req.Tenant, req.Session)
	reason, err := reserve(ctx, sv.topo.Sessions, key, req.RequestID, estimate, sv.s)
	if err != nil {
		return err
	}
	if reason != "" {
		return sv.finish(ctx, c, schemas.BreakGlassRefused, reason)
	}
	sv.log.Info("judge: calling panel", "request", req.RequestID, "type", typ, "panel", panel, "estimate_usd", estimate)

	outcome, why := sv.run(ctx, c, a, typ, panel, judgeModel)
	if ctx.Err() != nil {
		return ctx.Err() // stopped mid-call: another judge retries (the reservation is kept)
	}
	if err := settle(ctx, sv.topo.Sessions, key, req.RequestID, c.resp.Cost.ActualUSD); err != nil {
		return err
	}
	return sv.finish(ctx, c, outcome, why)
}

// run calls the panel and the judge (or the pass-through endpoint) and
// fills the response; it returns the outcome and its reason.
func (sv *Service) run(ctx context.Context, c *call, a Assembled, typ string, panel []string, judgeModel string) (outcome, reason string) {
	if pt := sv.s.Passthrough; pt != nil {
		return sv.runPassthrough(ctx, c, a, pt, panel, judgeModel)
	}
	results := sv.models.runPanel(ctx, panel, a)
	var answers []memberAnswer
	for _, r := range results {
		c.addCall(r)
		if r.OK {
			answers = append(answers, memberAnswer{model: r.Model, text: r.Response})
		} else {
			c.resp.FailedMembers = append(c.resp.FailedMembers, r.Model)
		}
	}
	if len(answers) == 0 {
		return schemas.BreakGlassFailed, fmt.Sprintf("every panel member failed (%s)", strings.Join(c.resp.FailedMembers, ", "))
	}
	jr := sv.models.synthesize(ctx, judgeModel, a, c.req, typ, answers, c.resp.Cost.ActualUSD, c.resp.Cost.BudgetUSD)
	for _, r := range jr.calls {
		c.addCall(r)
	}
	if jr.syn == nil {
		degrade(c.resp, jr.reason)
		return schemas.BreakGlassDegraded, "judge synthesis failed: " + jr.reason
	}
	c.apply(jr.syn)
	if n := len(c.resp.FailedMembers); n > 0 {
		c.resp.Reason = fmt.Sprintf("%d of %d panel members failed: %s", n, len(panel), strings.Join(c.resp.FailedMembers, ", "))
	}
	return schemas.BreakGlassAnswered, c.resp.Reason
}

func (sv *Service) runPassthrough(ctx context.Context, c *call, a Assembled, pt *Passthrough, panel []string, judgeModel string) (string, string) {
	start := time.Now()
	fr, err := sv.models.passthrough(ctx, pt, a, panel, judgeModel)
	res := schemas.MemberResult{Model: pt.Model, Role: RoleJudge, OK: err == nil, LatencyMS: time.Since(start).Milliseconds(),
		PromptTokens: fr.promptTokens, CompletionTokens: fr.completion, Response: fr.text}
	res.CostUSD = fr.costUSD
	if res.CostUSD < 0 || err != nil {
		res.CostUSD = sv.s.CallCost(pt.Model, fr.promptTokens, fr.completion)
	}
	if err != nil {
		res.Error = Redact(err.Error())
	}
	c.addCall(res)
	if err != nil {
		return schemas.BreakGlassFailed, "pass-through call failed: " + res.Error
	}
	syn, perr := parseSynthesis(fr.text, c.req.Arbitration)
	if perr != nil {
		degrade(c.resp, perr.Error())
		return schemas.BreakGlassDegraded, "fusion synthesis invalid: " + perr.Error()
	}
	c.apply(syn)
	return schemas.BreakGlassAnswered, ""
}

func (c *call) addCall(r schemas.MemberResult) {
	c.resp.Members = append(c.resp.Members, r)
	c.resp.Cost.ActualUSD += r.CostUSD
	c.resp.Cost.PromptTokens += r.PromptTokens
	c.resp.Cost.CompletionTokens += r.CompletionTokens
}

func (c *call) apply(syn *synthesis) {
	c.resp.Diagnosis, c.resp.Solution = syn.Diagnosis, syn.Solution
	c.resp.Alternatives, c.resp.Risks, c.resp.PanelAnalysis = syn.Alternatives, syn.Risks, syn.PanelAnalysis
}

// degrade fills a response whose synthesis failed: the raw panel answers
// stay in Members, the reason says what went wrong.
func degrade(r *schemas.BreakGlassResponse, reason string) {
	r.Diagnosis = "degraded answer: the judge's synthesis was not usable (" + reason + "); the raw panel answers are in members"
	r.Solution.Confidence = 0
}

func emptyAnalysis() schemas.PanelAnalysis {
	return schemas.PanelAnalysis{Consensus: []string{}, Contradictions: []string{}, PartialCoverage: []string{}, UniqueInsights: []string{}, BlindSpots: []string{}}
}

// finish stores the final response and appends its audit record.
func (sv *Service) finish(ctx context.Context, c *call, outcome, reason string) error {
	r := c.resp
	r.Outcome, r.Reason = outcome, Redact(reason)
	r.Approver = c.approver
	r.AnsweredAt = time.Now().UTC()
	// The audit record first: once the answer is visible, so is its
	// record (a redelivery's duplicate record is dropped by its msg id).
	rec := c.audit
	rec.Outcome, rec.Reason = outcome, r.Reason
	rec.ProblemType, rec.Panel, rec.JudgeModel = r.ProblemType, r.Panel, r.JudgeModel
	rec.EstimateUSD, rec.ActualUSD = r.Cost.EstimateUSD, r.Cost.ActualUSD
	rec.Confidence, rec.Diagnosis = r.Solution.Confidence, r.Diagnosis
	rec.Approver, rec.FailedMembers, rec.ExcludedFiles = c.approver, r.FailedMembers, r.ExcludedFiles
	if err := appendAudit(ctx, sv.js, sv.topo.NS, &rec); err != nil {
		return err
	}
	if err := sv.putAnswer(ctx, r); err != nil {
		return err
	}
	sv.log.Info("judge: request done", "request", r.RequestID, "outcome", outcome, "reason", r.Reason,
		"estimate_usd", r.Cost.EstimateUSD, "actual_usd", r.Cost.ActualUSD)
	return nil
}

// putAnswer stores r under its request id.
func (sv *Service) putAnswer(ctx context.Context, r *schemas.BreakGlassResponse) error {
	data, err := schemas.Encode(r)
	if err != nil {
		return fmt.Errorf("judge: response: %w", err)
	}
	if _, err := sv.topo.Answers.Put(ctx, r.RequestID, data); err != nil {
		return fmt.Errorf("judge: store answer: %w", err)
	}
	return nil
}

// answer returns the stored response of id, nil when there is none.
func (sv *Service) answer(ctx context.Context, id string) (*schemas.BreakGlassResponse, error) {
	return getAnswer(ctx, sv.topo.Answers, id)
}

func getAnswer(ctx context.Context, kv jetstream.KeyValue, id string) (*schemas.BreakGlassResponse, error) {
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("judge: read answer %s: %w", id, err)
	}
	var r schemas.BreakGlassResponse
	if err := schemas.Decode(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("judge: stored answer %s: %w", id, err)
	}
	return &r, nil
}

// history returns the earlier audit records of the request's session
// (the latest HistoryEntries final ones), for the prompt.
func (sv *Service) history(ctx context.Context, req *schemas.BreakGlassRequest) ([]schemas.BreakGlassAudit, error) {
	all, err := ListAudit(ctx, sv.js, sv.topo.NS, req.Tenant, req.Session)
	if err != nil {
		return nil, err
	}
	var out []schemas.BreakGlassAudit
	for _, rec := range all {
		if rec.RequestID != req.RequestID && (rec.Outcome == schemas.BreakGlassAnswered || rec.Outcome == schemas.BreakGlassDegraded || rec.Outcome == schemas.BreakGlassFailed) {
			out = append(out, rec)
		}
	}
	if n := sv.s.HistoryEntries; len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}
