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

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/judge/panel"
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
	// Concurrency is how many requests of each kind (break-glass,
	// arbitration) one judge handles at once. Default 4.
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
	// Metrics receives the judge's metrics (internal/metrics): requests
	// finished by kind and outcome, refusals, cost. Nil: none are kept.
	Metrics *metrics.Judge
}

// Service is one judge replica. Start it once; Stop it once.
type Service struct {
	js    jetstream.JetStream
	cfg   Config
	s     *Settings
	topo  *topology.JudgeTopology
	eps   *endpoints   // where the models live
	panel *panel.Panel // the model calls
	log   *slog.Logger
	// replies checks the reply subjects of approval decisions.
	replies *auth.ReplyGuard

	mu        sync.Mutex
	workers   []*bus.Worker   // set by Start: one a request stream
	approvals *approvalServer // set by Start
	stopped   bool
	stopOnce  sync.Once
}

// stream is one request stream a judge serves: how to get its consumer,
// and what handles a message from it.
type stream struct {
	consumer func(context.Context) (jetstream.Consumer, error)
	process  bus.Handler
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
	eps := &endpoints{s: &s, baseURL: cfg.BaseURL, apiKey: cfg.APIKey, getenv: cfg.Getenv}
	pn, err := panel.New(panel.Config{
		Endpoint:     eps.model,
		NewCompleter: func(ep Endpoint) (Completer, error) { return cfg.NewCompleter(ep, &s) },
		Cost:         s.CallCost,
	})
	if err != nil {
		return nil, err
	}
	if err := eps.reachable(pn); err != nil {
		return nil, err
	}
	topo, err := topology.EnsureJudge(ctx, js, topology.JudgeConfig{Namespace: cfg.Namespace, Storage: cfg.Storage})
	if err != nil {
		return nil, err
	}
	return &Service{js: js, cfg: cfg, s: &s, topo: topo, log: cfg.Logger, eps: eps, panel: pn,
		replies: auth.NewReplyGuard(js.Conn(), topo.NS, cfg.Logger)}, nil
}

// Start begins pulling requests, break-glass and arbitration ones; it
// returns at once. ctx bounds the handlers (ending it is a hard stop);
// Stop is the graceful one.
func (sv *Service) Start(ctx context.Context) error {
	var workers []*bus.Worker
	for _, st := range sv.streams() {
		cons, err := st.consumer(ctx)
		if err != nil {
			return err
		}
		w, err := bus.NewWorker(sv.js, cons, st.process, bus.WorkerConfig{
			Recreate:    st.consumer,
			Concurrency: sv.cfg.Concurrency,
			SoftStop:    sv.cfg.SoftStop,
			RetryDelay:  2 * time.Second,
			DoubleAck:   true,
			Redact:      guard.Redact,
			Logger:      sv.log,
		})
		if err != nil {
			return fmt.Errorf("judge: %w", err)
		}
		workers = append(workers, w)
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	switch {
	case sv.workers != nil:
		return errors.New("judge: already started")
	case sv.stopped:
		return errors.New("judge: stopped")
	}
	for i, w := range workers {
		if err := w.Start(ctx); err != nil {
			for _, started := range workers[:i] {
				started.Stop()
			}
			return fmt.Errorf("judge: %w", err)
		}
	}
	ap, err := sv.serveApprovals(ctx)
	if err != nil {
		for _, w := range workers {
			w.Stop()
		}
		return err
	}
	sv.workers, sv.approvals = workers, ap
	return nil
}

// streams are the request streams a judge serves: break-glass and
// arbitration requests, each through its own worker.
func (sv *Service) streams() []stream {
	var out []stream
	for _, st := range []struct {
		name    string
		process bus.Handler
	}{
		{sv.topo.NS.JudgeStream(), sv.processBreakGlass},
		{sv.topo.NS.ArbitrateStream(), sv.processArbitration},
	} {
		out = append(out, stream{process: st.process, consumer: func(ctx context.Context) (jetstream.Consumer, error) {
			// Create the judge's topology again where it is missing.
			if _, err := topology.EnsureJudge(ctx, sv.js, topology.JudgeConfig{Namespace: sv.cfg.Namespace, Storage: sv.cfg.Storage}); err != nil {
				return nil, err
			}
			cons, err := sv.js.Consumer(ctx, st.name, bus.ConsumerJudges)
			if err != nil {
				return nil, fmt.Errorf("judge: consumer on %s: %w", st.name, err)
			}
			return cons, nil
		}})
	}
	return out
}

// Stop stops fetching, lets requests in flight finish for up to SoftStop,
// then cancels them (they are redelivered to another judge), and waits.
// Shutdown order: approvals (the decision in hand finishes), fetch loop,
// handlers, model clients.
func (sv *Service) Stop() {
	sv.stopOnce.Do(func() {
		sv.mu.Lock()
		sv.stopped = true
		workers, ap := sv.workers, sv.approvals
		sv.mu.Unlock()
		if ap != nil {
			ap.stop()
		}
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Go(w.Stop)
		}
		wg.Wait()
		sv.panel.Close()
	})
}

// processBreakGlass handles one break-glass request message; its error is
// the message's fate (bus.Worker): answered, or refused (a refusal is a
// stored response) → acked, confirmed by the server; unreadable →
// terminated; the bus failed → handed back after 2s, so another judge
// retries (at once when this one stops). The worker also keeps the message
// while the panel works, and turns a panic into a retry.
func (sv *Service) processBreakGlass(ctx context.Context, msg jetstream.Msg) error {
	tenant, ok := sv.topo.NS.JudgeRequestTenant(msg.Subject())
	if !ok {
		return sv.unreadable(fmt.Errorf("judge: subject %q names no tenant", msg.Subject()))
	}
	var req schemas.BreakGlassRequest
	if err := schemas.Decode(msg.Data(), &req); err != nil {
		return sv.unreadable(err)
	}
	return sv.retried(req.RequestID, sv.handle(ctx, &req, tenant))
}

// unreadable is the fate of a request no answer can be stored for (it
// has no usable id): terminated.
func (sv *Service) unreadable(err error) error {
	sv.log.Warn("judge: unreadable request", "err", guard.Redact(err.Error()))
	return bus.Drop(err, clip(err.Error(), 200))
}

// retried logs a request the bus failed for, to be retried.
func (sv *Service) retried(id string, err error) error {
	if err != nil {
		sv.log.Warn("judge: request will be retried", "request", id, "err", guard.Redact(err.Error()))
	}
	return err
}

// call is one request in progress.
type call struct {
	req      *schemas.BreakGlassRequest
	resp     *schemas.BreakGlassResponse
	audit    schemas.BreakGlassAudit
	approver approver
}

// handle runs the gates and the panel for req, which came on tenant's
// subject, and stores the response. An error means the bus failed
// (retry); every refusal is a stored response.
func (sv *Service) handle(ctx context.Context, req *schemas.BreakGlassRequest, tenant string) error {
	// The subject proves the tenant (a secured server lets only tenant T's
	// identity publish on T's subject); the body's tenant is only a claim.
	// Everything below is keyed by the proven one.
	claimed := req.Tenant
	req.Tenant = tenant
	// A redelivered request that was already answered is done.
	var prev schemas.BreakGlassResponse
	if found, err := getAnswer(ctx, sv.topo.Answers, tenant, req.RequestID, &prev); err != nil || found && schemas.FinalBreakGlassOutcome(prev.Outcome) {
		return err
	}
	// The approval record, read once: an approved request runs as the
	// copy stored when it was held (what the person approved), whatever
	// content this copy of the id carries.
	held, err := getApproval(ctx, sv.topo.Approvals, bus.JudgeApprovalKey(tenant, req.RequestID))
	if err != nil {
		return err
	}
	if held != nil && held.State == schemas.ApprovalApproved && held.Request != nil && claimed == tenant {
		stored := *held.Request
		stored.Tenant = tenant
		req = &stored
	}
	c := &call{req: req, resp: &schemas.BreakGlassResponse{
		Header:    schemas.NewHeader(schemas.KindBreakGlassResponse),
		RequestID: req.RequestID, Tenant: req.Tenant, Session: req.Session,
		Alternatives: []string{}, Risks: []string{},
		Solution:      schemas.Solution{FilesToChange: []string{}, CodeSnippets: map[string]string{}},
		PanelAnalysis: emptyAnalysis(),
	}}
	c.audit = schemas.BreakGlassAudit{RequestID: req.RequestID, Tenant: req.Tenant, Session: req.Session,
		Requester: req.Requester, RequestKind: schemas.KindBreakGlassRequest, Problem: req.Problem}
	c.resp.Cost.BudgetUSD = req.BudgetUSD
	if c.resp.Cost.BudgetUSD == 0 {
		c.resp.Cost.BudgetUSD = sv.s.DefaultBudgetUSD
	}
	c.resp.ExcludedFiles = redactExcluded(req.ExcludedFiles)

	// Gates that need nothing but the request.
	if claimed != tenant {
		return sv.finish(ctx, c, schemas.BreakGlassRefused, fmt.Sprintf("tenant mismatch: the request names tenant %q but came on tenant %q's subject; a client asks only for its own tenant", claimed, tenant))
	}
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
	if len(req.Plugins) == 1 {
		if reason := sv.s.requestModels(panel, judgeModel); reason != "" {
			return sv.finish(ctx, c, schemas.BreakGlassRefused, reason)
		}
	}

	history, err := sv.history(ctx, req)
	if err != nil {
		return err
	}
	a := Assemble(req, typ, history, sv.s)
	c.resp.ExcludedFiles = a.Excluded
	estimate := sv.s.Estimate(a, panel, judgeModel)
	c.resp.Cost.EstimateUSD = estimate

	// The cost gate, with approval, at the stricter of the declared and
	// the detected type's threshold.
	detected := DetectRequest(req)
	decision, reason := costGate(held, req.RequestID, &c.approver, func(approved bool) (string, string) {
		return sv.s.RequestGate(req.ProblemType, detected, estimate, c.resp.Cost.BudgetUSD, approved)
	})
	switch {
	case decision == gateDenied:
		return nil // a denial: Deny wrote the final response and the audit record
	case decision == GateRefuse:
		return sv.finish(ctx, c, schemas.BreakGlassRefused, reason)
	case decision == GateHold:
		// The held copy is stored after the secret guard: withheld files
		// dropped, text redacted (see held.go).
		if err := sv.storeHold(ctx, &schemas.BreakGlassApproval{RequestID: req.RequestID, Tenant: req.Tenant, Session: req.Session,
			EstimateUSD: estimate, Reason: reason, Request: guardedRequest(req, sv.s)}); err != nil {
			return err
		}
		return sv.finish(ctx, c, schemas.BreakGlassHeld, reason)
	}

	// Session and tenant limits, atomically across replicas.
	reason, err = sv.reserveCall(ctx, req, estimate)
	if err != nil {
		return err
	}
	if reason != "" {
		return sv.finish(ctx, c, schemas.BreakGlassRefused, reason)
	}
	sv.log.Info("judge: calling panel", "request", req.RequestID, "type", typ, "panel", panel, "estimate_usd", estimate)

	con := sv.consult(ctx, a, panel, judgeModel, nil, &c.resp.Cost)
	if ctx.Err() != nil {
		return ctx.Err() // stopped mid-call: another judge retries (the reservation is kept)
	}
	if err := sv.settleCall(ctx, req, c.resp.Cost.ActualUSD); err != nil {
		return err
	}
	c.resp.Members, c.resp.FailedMembers = con.members, con.failed
	switch {
	case con.syn != nil:
		c.apply(con.syn)
	case con.outcome == schemas.BreakGlassDegraded:
		c.resp.Diagnosis = "degraded answer: " + con.reason + "; the raw panel answers are in members"
	}
	return sv.finish(ctx, c, con.outcome, con.reason)
}

// consultation is what the panel and the judge (or the pass-through
// endpoint) gave on one request.
type consultation struct {
	members []schemas.MemberResult
	// failed lists the panel members that gave no answer.
	failed []string
	// syn is the judge's valid answer; set exactly when outcome is
	// answered.
	syn *synthesis
	// outcome is answered, degraded or failed; reason explains it (for
	// answered: the members that failed, if any).
	outcome, reason string
}

// consult calls the panel on a in parallel, then the judge on their
// answers (or, in pass-through mode, the fusion endpoint once), adding
// what every call cost to cost, whose budget bounds the judge's attempts.
// candidates, for an arbitration, are what the judge must choose from.
func (sv *Service) consult(ctx context.Context, a Assembled, panel []string, judgeModel string, candidates []schemas.TallyEntry, cost *schemas.BreakGlassCost) consultation {
	var con consultation
	add := func(r schemas.MemberResult) {
		con.members = append(con.members, r)
		cost.ActualUSD += r.CostUSD
		cost.PromptTokens += r.PromptTokens
		cost.CompletionTokens += r.CompletionTokens
	}
	if pt := sv.s.Passthrough; pt != nil {
		res, text := sv.passthroughCall(ctx, pt, a, panel, judgeModel)
		add(res)
		if !res.OK {
			con.outcome, con.reason = schemas.BreakGlassFailed, "pass-through call failed: "+res.Error
			return con
		}
		return con.judged(parseSynthesis(text, candidates))
	}
	var answers []memberAnswer
	for _, r := range sv.ask(ctx, panel, a) {
		add(r)
		if r.OK {
			answers = append(answers, memberAnswer{model: r.Model, text: r.Response})
		} else {
			con.failed = append(con.failed, r.Model)
		}
	}
	if len(answers) == 0 {
		con.outcome, con.reason = schemas.BreakGlassFailed, fmt.Sprintf("every panel member failed (%s)", strings.Join(con.failed, ", "))
		return con
	}
	jr := sv.synthesize(ctx, judgeModel, a, candidates, answers, cost.ActualUSD, cost.BudgetUSD)
	for _, r := range jr.calls {
		add(r)
	}
	if jr.syn == nil {
		con.outcome, con.reason = schemas.BreakGlassDegraded, "judge synthesis failed: "+jr.reason
		return con
	}
	con.outcome, con.syn = schemas.BreakGlassAnswered, jr.syn
	if n := len(con.failed); n > 0 {
		con.reason = fmt.Sprintf("%d of %d panel members failed: %s", n, len(panel), strings.Join(con.failed, ", "))
	}
	return con
}

// judged records the pass-through endpoint's synthesis: answered when
// valid (no retry), else degraded.
func (con consultation) judged(syn *synthesis, err error) consultation {
	if err != nil {
		con.outcome, con.reason = schemas.BreakGlassDegraded, "fusion synthesis invalid: "+err.Error()
		return con
	}
	con.outcome, con.syn = schemas.BreakGlassAnswered, syn
	return con
}

// passthroughCall makes the pass-through call and reports it as the
// judge's; text is the endpoint's synthesis.
func (sv *Service) passthroughCall(ctx context.Context, pt *Passthrough, a Assembled, panel []string, judgeModel string) (schemas.MemberResult, string) {
	start := time.Now()
	fr, err := sv.passthrough(ctx, pt, a, panel, judgeModel)
	res := schemas.MemberResult{Model: pt.Model, Role: RoleJudge, OK: err == nil, LatencyMS: time.Since(start).Milliseconds(),
		PromptTokens: fr.promptTokens, CompletionTokens: fr.completion, Response: fr.text}
	res.CostUSD = fr.costUSD
	if res.CostUSD < 0 || err != nil {
		res.CostUSD = sv.s.CallCost(pt.Model, fr.promptTokens, fr.completion)
	}
	if err != nil {
		res.Error = guard.Redact(err.Error())
	}
	return res, fr.text
}

func (c *call) apply(syn *synthesis) {
	c.resp.Diagnosis, c.resp.Solution = syn.Diagnosis, syn.Solution
	c.resp.Alternatives, c.resp.Risks, c.resp.PanelAnalysis = syn.Alternatives, syn.Risks, syn.PanelAnalysis
}

func emptyAnalysis() schemas.PanelAnalysis {
	return schemas.PanelAnalysis{Consensus: []string{}, Contradictions: []string{}, PartialCoverage: []string{}, UniqueInsights: []string{}, BlindSpots: []string{}}
}

// finish stores the final response and appends its audit record.
func (sv *Service) finish(ctx context.Context, c *call, outcome, reason string) error {
	r := c.resp
	r.Outcome, r.Reason = outcome, guard.Redact(reason)
	r.Approver = c.approver.by
	r.AnsweredAt = time.Now().UTC()
	// The audit record first: once the answer is visible, so is its
	// record (a redelivery's duplicate record is dropped by its msg id).
	rec := c.audit
	rec.Outcome, rec.Reason = outcome, r.Reason
	rec.ProblemType, rec.Panel, rec.JudgeModel = r.ProblemType, r.Panel, r.JudgeModel
	rec.EstimateUSD, rec.ActualUSD = r.Cost.EstimateUSD, r.Cost.ActualUSD
	rec.Confidence, rec.Diagnosis = r.Solution.Confidence, r.Diagnosis
	rec.Approver, rec.ApproverIdentity = c.approver.by, c.approver.as
	rec.FailedMembers, rec.ExcludedFiles = r.FailedMembers, r.ExcludedFiles
	if err := appendAudit(ctx, sv.js, sv.topo.NS, &rec); err != nil {
		return err
	}
	if err := putAnswer(ctx, sv.topo.Answers, r.Tenant, r.RequestID, r); err != nil {
		return err
	}
	sv.cfg.Metrics.Finished(metricKindBreakGlass, outcome, refusalReason(outcome, reason), r.Tenant, r.Cost.ActualUSD)
	sv.log.Info("judge: request done", "request", r.RequestID, "outcome", outcome, "reason", r.Reason,
		"estimate_usd", r.Cost.EstimateUSD, "actual_usd", r.Cost.ActualUSD)
	return nil
}

// putAnswer stores r, a response of either kind, under tenant's key of
// request id.
func putAnswer(ctx context.Context, kv jetstream.KeyValue, tenant, id string, r schemas.Message) error {
	data, err := schemas.Encode(r)
	if err != nil {
		return fmt.Errorf("judge: response: %w", err)
	}
	if _, err := kv.Put(ctx, bus.JudgeAnswerKey(tenant, id), data); err != nil {
		return fmt.Errorf("judge: store answer: %w", err)
	}
	return nil
}

// getAnswer reads the stored response of tenant's request id into r;
// found is false when there is none.
func getAnswer(ctx context.Context, kv jetstream.KeyValue, tenant, id string, r schemas.Message) (found bool, err error) {
	e, err := kv.Get(ctx, bus.JudgeAnswerKey(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("judge: read answer %s: %w", id, err)
	}
	if err := schemas.Decode(e.Value(), r); err != nil {
		return false, fmt.Errorf("judge: stored answer %s: %w", id, err)
	}
	return true, nil
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
		// A job's arbitrations share its id's audit subject with a session
		// of that name; they are not break-glass history.
		if rec.RequestID != req.RequestID && rec.RequestKind != schemas.KindArbitrationRequest &&
			(rec.Outcome == schemas.BreakGlassAnswered || rec.Outcome == schemas.BreakGlassDegraded || rec.Outcome == schemas.BreakGlassFailed) {
			out = append(out, rec)
		}
	}
	if n := sv.s.HistoryEntries; len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}

// reserveCall counts a break-glass call against its session's limits,
// then its tenant's over the rolling window, atomically across replicas;
// a call the tenant's limits refuse gives its session reservation back.
// Each key's counters are rebuilt from the audit trail when the key is
// missing (auditSeed), so deleting one resets nothing.
func (sv *Service) reserveCall(ctx context.Context, req *schemas.BreakGlassRequest, estimate float64) (reason string, err error) {
	skey, sl := bus.JudgeSessionKey(req.Tenant, req.Session), sv.s.sessionLimits()
	reason, err = reserve(ctx, sv.topo.Sessions, skey, req.RequestID, estimate, sl, sv.auditSeed(req.Tenant, req.Session, 0, schemas.KindBreakGlassRequest))
	if err != nil || reason != "" {
		return reason, err
	}
	reason, err = sv.reserveTenant(ctx, req.Tenant, req.RequestID, estimate)
	if err == nil && reason != "" {
		err = release(ctx, sv.topo.Sessions, skey, req.RequestID)
	}
	return reason, err
}

// reserveTenant counts request id against its tenant's limits over the
// rolling window: break-glass calls and arbitrations alike. The tenant's
// counters are rebuilt from the audit trail (both kinds) when missing.
func (sv *Service) reserveTenant(ctx context.Context, tenant, id string, estimate float64) (reason string, err error) {
	tl := sv.s.tenantLimits()
	return reserve(ctx, sv.topo.Sessions, bus.JudgeTenantKey(tenant), id, estimate, tl, sv.tenantSeed(tenant))
}

// settleTenant replaces request id's reservation on its tenant's window
// with its actual cost.
func (sv *Service) settleTenant(ctx context.Context, tenant, id string, actual float64) error {
	return settle(ctx, sv.topo.Sessions, bus.JudgeTenantKey(tenant), id, actual, sv.s.tenantLimits(), sv.tenantSeed(tenant))
}

// tenantSeed rebuilds a tenant's window from the audit trail: every call
// of either kind that ran the panel within the window.
func (sv *Service) tenantSeed(tenant string) seedFunc {
	return sv.auditSeed(tenant, "", sv.s.tenantLimits().window, schemas.KindBreakGlassRequest, schemas.KindArbitrationRequest)
}

// settleCall replaces a call's reservations with its actual cost.
func (sv *Service) settleCall(ctx context.Context, req *schemas.BreakGlassRequest, actual float64) error {
	if err := settle(ctx, sv.topo.Sessions, bus.JudgeSessionKey(req.Tenant, req.Session), req.RequestID, actual, sv.s.sessionLimits(),
		sv.auditSeed(req.Tenant, req.Session, 0, schemas.KindBreakGlassRequest)); err != nil {
		return err
	}
	return sv.settleTenant(ctx, req.Tenant, req.RequestID, actual)
}
