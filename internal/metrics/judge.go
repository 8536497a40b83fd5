package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Judge holds a judge's metrics. A nil *Judge is valid: its methods do
// nothing.
type Judge struct {
	calls, refusals, cost *prometheus.CounterVec
}

// NewJudge makes the judge metrics on r.
func NewJudge(r *Registry) *Judge {
	j := &Judge{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_judge_calls_total",
			Help: "Requests the judge finished, by kind (break_glass, arbitration) and outcome."}, []string{"kind", "outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_judge_refusals_total",
			Help: "Requests the judge refused, by reason."}, []string{"reason"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_judge_cost_usd_total",
			Help: "What the judge's panel and judge model calls cost in US dollars."}, []string{"tenant"}),
	}
	r.register(j.calls, j.refusals, j.cost)
	return j
}

// Finished counts a request of kind finished with outcome, refused for
// reason (a short category; "" when not refused), costing usd for tenant.
func (j *Judge) Finished(kind, outcome, reason, tenant string, usd float64) {
	if j == nil {
		return
	}
	j.calls.WithLabelValues(kind, outcome).Inc()
	if reason != "" {
		j.refusals.WithLabelValues(reason).Inc()
	}
	if usd > 0 {
		j.cost.WithLabelValues(tenant).Add(usd)
	}
}
