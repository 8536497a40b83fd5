package metrics

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/makerfleet/makerfleet/internal/llm"
)

// Voter holds a voter's metrics. A nil *Voter is valid: its methods do
// nothing.
type Voter struct {
	answered, redFlagged, errors *prometheus.CounterVec
	latency                      *prometheus.HistogramVec
	inFlight                     prometheus.Gauge
	models                       modelLabels // the model label's values (models.go)
	// failedTotal and limitedTotal are maker_model_errors_total summed
	// over models and codes (but no_usage), and its code 429: what the
	// voter's presence record reports (ErrorTotals).
	failedTotal, limitedTotal atomic.Int64
}

// NewVoter makes the voter metrics on r.
func NewVoter(r *Registry) *Voter {
	v := &Voter{
		answered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_samples_answered_total",
			Help: "Sample results published (any outcome: vote, red flag, skipped, cancelled). " + modelHelp}, []string{"model"}),
		redFlagged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_voter_red_flagged_total",
			Help: "Sample results published as red flags, by reason."}, []string{"model", "reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_model_errors_total",
			Help: "Failed model call attempts, retried ones included, by code (429, 5xx, timeout, other), and replies without usage (no_usage: tokens estimated). " + modelHelp}, []string{"model", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "maker_model_latency_seconds",
			Help: "Model calls' latency, retries included, of calls that got a reply.", Buckets: latencyBuckets}, []string{"model"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "maker_voter_in_flight",
			Help: "Model calls in progress on this voter."}),
	}
	r.register(v.answered, v.redFlagged, v.errors, v.latency, v.inFlight)
	return v
}

// Answered counts a result published for model; reason is its red flag
// ("" for none).
func (v *Voter) Answered(model, reason string) {
	if v == nil {
		return
	}
	model = v.models.label(model)
	v.answered.WithLabelValues(model).Inc()
	if reason != "" {
		v.redFlagged.WithLabelValues(model, reason).Inc()
	}
}

// CallStarted marks a model call begun; CallDone ends it: err nil records
// its latency, any other error (but the caller's cancellation) counts as
// an error of its code.
func (v *Voter) CallStarted() {
	if v != nil {
		v.inFlight.Inc()
	}
}

// CallDone ends a call started with CallStarted; ctx is the call's.
func (v *Voter) CallDone(ctx context.Context, model string, took time.Duration, err error) {
	if v == nil {
		return
	}
	v.inFlight.Dec()
	switch {
	case err == nil:
		v.latency.WithLabelValues(v.models.label(model)).Observe(took.Seconds())
	case ctx.Err() != nil:
		// cancelled: the step was decided, or the voter stops
	default:
		v.ModelError(model, err)
	}
}

// ModelError counts one failed attempt of a call to model (llm.Config's
// OnRetry sees the retried ones).
func (v *Voter) ModelError(model string, err error) {
	if v != nil && err != nil {
		code := ErrorCode(err)
		v.errors.WithLabelValues(v.models.label(model), code).Inc()
		v.failedTotal.Add(1)
		if code == "429" {
			v.limitedTotal.Add(1)
		}
	}
}

// ErrorTotals are the failed model call attempts counted so far (every
// code of maker_model_errors_total but no_usage) and those answered 429
// among them; 0, 0 for a nil *Voter.
func (v *Voter) ErrorTotals() (failed, rateLimited int64) {
	if v == nil {
		return 0, 0
	}
	return v.failedTotal.Load(), v.limitedTotal.Load()
}

// NoUsage counts a reply of model that came without usage (a stream whose
// server ignores include_usage: its tokens are estimated), as code
// no_usage of maker_model_errors_total.
func (v *Voter) NoUsage(model string) {
	if v != nil {
		v.errors.WithLabelValues(v.models.label(model), CodeNoUsage).Inc()
	}
}

// CodeNoUsage is the maker_model_errors_total code of a reply without
// usage.
const CodeNoUsage = "no_usage"

// modelHelp ends the help of a metric with a model label.
const modelHelp = "The first 32 distinct models are named, later ones are counted as model \"other\"."

// ErrorCode sorts a model error: "429", "5xx", "timeout" or "other".
func ErrorCode(err error) string {
	st := llm.HTTPStatus(err)
	var ne net.Error
	switch {
	case st == 429:
		return "429"
	case st >= 500 && st <= 599:
		return "5xx"
	case errors.Is(err, llm.ErrAttemptTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "other"
}
