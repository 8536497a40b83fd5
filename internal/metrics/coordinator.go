package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Coordinator holds a coordinator's metrics. A nil *Coordinator is valid:
// its methods do nothing and Tenant returns nil.
type Coordinator struct {
	reg                     *Registry
	requested, votes        *prometheus.CounterVec
	redFlagged, decisions   *prometheus.CounterVec
	rounds, samples, margin *prometheus.HistogramVec
	escalations, finished   *prometheus.CounterVec
	tokens, cost            *prometheus.CounterVec
	forged, overclaimed     *prometheus.CounterVec
	takeovers               prometheus.Counter
	refused                 *prometheus.CounterVec
	models                  modelLabels // the model label's values (models.go)
}

// NewCoordinator makes the coordinator metrics on r.
func NewCoordinator(r *Registry) *Coordinator {
	c := &Coordinator{
		reg: r,
		requested: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_samples_requested_total",
			Help: "Sample requests published, re-publishes of overdue samples included."}, []string{"tenant"}),
		votes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_votes_total",
			Help: "Valid votes counted in decided steps."}, []string{"tenant"}),
		redFlagged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_samples_red_flagged_total",
			Help: "Red-flagged samples counted in decided steps, by reason."}, []string{"tenant", "reason"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_decisions_total",
			Help: "Steps decided, by the rung that decided them (own_model, stronger_model, panel, person)."}, []string{"tenant", "rung"}),
		rounds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "maker_step_rounds",
			Help: "Waves of sample requests a decided step published (this owner's).", Buckets: countBuckets}, []string{"tenant"}),
		samples: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "maker_step_samples",
			Help: "Samples a decided step counted, every rung's.", Buckets: countBuckets}, []string{"tenant"}),
		margin: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "maker_step_margin",
			Help: "The winner's lead at a decision by votes.", Buckets: marginBuckets}, []string{"tenant"}),
		escalations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_escalations_total",
			Help: "Steps that climbed the escalation ladder, by the rung climbed to."}, []string{"tenant", "rung"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "maker_lease_takeovers_total",
			Help: "Jobs this coordinator resumed from an earlier owner's journal."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_records_refused_total",
			Help: "Batch records and lines refused because what they say disagrees with where they are stored " +
				"(the tenant is the key's or subject's), by reason: tenant, batch_id, key, lines, line."}, []string{"tenant", "reason"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_jobs_finished_total",
			Help: "Jobs this coordinator finished, by final state."}, []string{"tenant", "state"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_tokens_total",
			Help: "Model tokens the jobs' samples used, by model and kind (prompt, completion). " + modelHelp}, []string{"tenant", "model", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_cost_usd_total",
			Help: "What the jobs' samples (and arbitrations) cost in US dollars, at the fleet's prices (maker prices). " + modelHelp}, []string{"tenant", "model"}),
		forged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_forged_results_total",
			Help: "Result messages dropped because their token is not the one issued for their sample: answers for samples their sender was never handed."}, []string{"tenant"}),
		overclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_overclaimed_results_total",
			Help: "Results that claimed more tokens than their request allows: counted as the red flag overclaim, charged at the bound."}, []string{"tenant"}),
	}
	r.register(c.requested, c.votes, c.redFlagged, c.decisions, c.rounds, c.samples, c.margin,
		c.escalations, c.takeovers, c.finished, c.tokens, c.cost, c.refused, c.forged, c.overclaimed)
	return c
}

// JobsRunning registers maker_jobs_running, read from running at scrape
// time. Only the first call on a registry counts.
func (c *Coordinator) JobsRunning(running func() int) {
	if c == nil {
		return
	}
	_ = c.reg.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "maker_jobs_running",
		Help: "Jobs this coordinator runs now."}, func() float64 { return float64(running()) }))
}

// JobsWaiting registers maker_jobs_waiting{reason}, read from waiting at
// scrape time for each of reasons: the running jobs that wait on the
// fleet (provider_unavailable: voters cannot have their model served;
// unanswered: their samples go unanswered). Only the first call counts.
func (c *Coordinator) JobsWaiting(reasons []string, waiting func(reason string) int) {
	if c == nil {
		return
	}
	_ = c.reg.reg.Register(&waitingCollector{reasons: reasons, waiting: waiting, desc: prometheus.NewDesc("maker_jobs_waiting",
		"Running jobs of this coordinator that wait on the fleet, by why: provider_unavailable (voters cannot have the model served), unanswered (samples unanswered past the sample timeout).",
		[]string{"reason"}, nil)})
}

// waitingCollector reports maker_jobs_waiting at scrape time.
type waitingCollector struct {
	reasons []string
	waiting func(string) int
	desc    *prometheus.Desc
}

func (w *waitingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- w.desc }

func (w *waitingCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range w.reasons {
		ch <- prometheus.MustNewConstMetric(w.desc, prometheus.GaugeValue, float64(w.waiting(r)), r)
	}
}

// LeaseTakeover counts a job resumed from an earlier owner.
func (c *Coordinator) LeaseTakeover() {
	if c != nil {
		c.takeovers.Inc()
	}
}

// RecordRefused counts a record stored under tenant's key or subject that
// was refused for reason (it names another tenant, batch or line count).
func (c *Coordinator) RecordRefused(tenant, reason string) {
	if c != nil {
		c.refused.WithLabelValues(tenant, reason).Inc()
	}
}

// JobFinished counts a job of tenant finished in state.
func (c *Coordinator) JobFinished(tenant, state string) {
	if c != nil {
		c.finished.WithLabelValues(tenant, state).Inc()
	}
}

// Tenant returns the handles of one tenant's figures, for one job's
// goroutine (not safe for concurrent use: it caches label lookups).
func (c *Coordinator) Tenant(tenant string) *CoordinatorTenant {
	if c == nil {
		return nil
	}
	return &CoordinatorTenant{
		c: c, tenant: tenant,
		requested: c.requested.WithLabelValues(tenant), votes: c.votes.WithLabelValues(tenant),
		rounds: c.rounds.WithLabelValues(tenant), samples: c.samples.WithLabelValues(tenant),
		margin:    c.margin.WithLabelValues(tenant),
		decisions: map[string]prometheus.Counter{},
		byModel:   map[string]*modelCounters{},
	}
}

// modelCounters are one model's token and cost counters for a tenant.
type modelCounters struct{ prompt, completion, cost prometheus.Counter }

// CoordinatorTenant is one tenant's coordinator figures, as one job sees
// them. A nil *CoordinatorTenant is valid: its methods do nothing.
type CoordinatorTenant struct {
	c                       *Coordinator
	tenant                  string
	requested, votes        prometheus.Counter
	rounds, samples, margin prometheus.Observer
	decisions               map[string]prometheus.Counter
	byModel                 map[string]*modelCounters
}

// SamplesRequested counts n sample requests published.
func (t *CoordinatorTenant) SamplesRequested(n int) {
	if t != nil && n > 0 {
		t.requested.Add(float64(n))
	}
}

// Counted adds a journal entry's counted figures: valid votes and red
// flags by reason.
func (t *CoordinatorTenant) Counted(votes int64, redFlags map[string]int64) {
	if t == nil {
		return
	}
	if votes > 0 {
		t.votes.Add(float64(votes))
	}
	for why, n := range redFlags {
		if n > 0 {
			t.c.redFlagged.WithLabelValues(t.tenant, why).Add(float64(n))
		}
	}
}

// Decision counts a step decided on rung after rounds waves of requests
// and samples samples; margin is the winner's lead, observed when
// byVotes (a panel's or a person's choice has none).
func (t *CoordinatorTenant) Decision(rung string, rounds, samples, margin int, byVotes bool) {
	if t == nil {
		return
	}
	d, ok := t.decisions[rung]
	if !ok {
		d = t.c.decisions.WithLabelValues(t.tenant, rung)
		t.decisions[rung] = d
	}
	d.Inc()
	t.rounds.Observe(float64(rounds))
	t.samples.Observe(float64(samples))
	if byVotes {
		t.margin.Observe(float64(margin))
	}
}

// Escalation counts a step that climbed to rung.
func (t *CoordinatorTenant) Escalation(rung string) {
	if t != nil {
		t.c.escalations.WithLabelValues(t.tenant, rung).Inc()
	}
}

// Tokens adds tokens model used and what they cost.
func (t *CoordinatorTenant) Tokens(model string, prompt, completion int64, costUSD float64) {
	if t == nil {
		return
	}
	model = t.c.models.label(model) // bounded: so is byModel
	m := t.byModel[model]
	if m == nil {
		m = &modelCounters{
			prompt:     t.c.tokens.WithLabelValues(t.tenant, model, "prompt"),
			completion: t.c.tokens.WithLabelValues(t.tenant, model, "completion"),
			cost:       t.c.cost.WithLabelValues(t.tenant, model),
		}
		t.byModel[model] = m
	}
	if prompt > 0 {
		m.prompt.Add(float64(prompt))
	}
	if completion > 0 {
		m.completion.Add(float64(completion))
	}
	if costUSD > 0 {
		m.cost.Add(costUSD)
	}
}

// Untrusted counts results dropped as forged and results that claimed
// more tokens than their request allows.
func (t *CoordinatorTenant) Untrusted(forged, overclaimed int64) {
	if t == nil {
		return
	}
	if forged > 0 {
		t.c.forged.WithLabelValues(t.tenant).Add(float64(forged))
	}
	if overclaimed > 0 {
		t.c.overclaimed.WithLabelValues(t.tenant).Add(float64(overclaimed))
	}
}

// Cost adds usd spent on model (an arbitration's, say).
func (t *CoordinatorTenant) Cost(model string, usd float64) {
	if t != nil && usd > 0 {
		t.c.cost.WithLabelValues(t.tenant, t.c.models.label(model)).Add(usd)
	}
}
