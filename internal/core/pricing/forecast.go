package pricing

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Forecast assumptions.
const (
	// DefaultP is the chance a valid sample is right assumed for a job
	// whose spec and task give none; PessimisticDefaultP is the band's
	// high end then (a wide band: a guess).
	DefaultP            = 0.99
	PessimisticDefaultP = 0.9
	// BytesPerToken is how many prompt bytes make a token in the expected
	// and low figures (English text with common tokenizers: about 4).
	BytesPerToken = 4
	// ExpectedOutputShare is the share of max_output_tokens a reply is
	// taken to use in the expected figure of a job whose tokens per call
	// were not measured (the planner's 300 of 750). The low figure takes
	// the right answer itself (the task's reference vote for its first
	// state, at BytesPerToken bytes a token: no reply can say less), the
	// high figure all of max_output_tokens (the reservations' bound).
	ExpectedOutputShare = 0.4
)

// PEstimator is implemented by task instances that declare the chance a
// valid sample of theirs is right (measured by a calibration, say).
type PEstimator interface {
	PEstimate() float64
}

// ErrOverBudget: a job's budget_usd is below the lowest cost its forecast
// allows; it is refused at submit, nothing is enqueued.
var ErrOverBudget = errors.New("pricing: budget below the forecast")

// Forecast is the planner's estimate of what spec will take, bound to
// inst, for a tenant with quota q: steps, samples, cost and time, each
// with a band.
//
//   - p is the spec's p_estimate, else the task's declared one
//     (PEstimator), else DefaultP with a wide band (the high end at
//     PessimisticDefaultP); a given p's high end doubles its error rate.
//   - Samples a step: at least k (every vote agrees: the low end);
//     E[N]/v at p (internal/plan: the expected figure); the paper's
//     shortcut k/(2p−1)/v at the pessimistic p (the high end).
//   - A sample's cost: the prompt of the task's first state at
//     BytesPerToken bytes a token (low and expected) or its upper bound
//     (PromptTokensBound: high), and a reply of the right answer's own
//     size (low), ExpectedOutputShare or all of max_output_tokens, at
//     the fleet's price of the voters' own model from its table (Of: on
//     a fleet without a table, the job's own pricing, said to be
//     unverified; else no cost). The spec's token estimates (a
//     calibration's) replace the expected figure's, the band widened to
//     hold them; with them and p measured the forecast is Calibrated.
//   - Time: samples over the tenant's samples per second, when it has a
//     rate limit (else none is given).
func Forecast(spec schemas.JobSpec, inst task.Instance, q schemas.TenantQuota, prices Table) schemas.Forecast {
	spec.ApplyDefaults()
	var basis []string
	steps := inst.TotalSteps()
	if spec.StepLimit > 0 && spec.StepLimit < steps {
		steps = spec.StepLimit
	}
	p, pess := DefaultP, PessimisticDefaultP
	switch d, ok := inst.(PEstimator); {
	case spec.PEstimate > 0.5 && spec.PEstimate < 1:
		p = spec.PEstimate
		pess = pessimistic(p)
		basis = append(basis, fmt.Sprintf("p=%g from the job", p))
	case ok && d.PEstimate() > 0.5 && d.PEstimate() < 1:
		p = d.PEstimate()
		pess = pessimistic(p)
		basis = append(basis, fmt.Sprintf("p=%g declared by the task", p))
	default:
		basis = append(basis, fmt.Sprintf("p=%g assumed (neither the job nor the task gives one; high end at p=%g)", p, pess))
	}
	v := spec.ValidFraction
	k := float64(spec.K)
	lowN, expN, highN := k, plan.ExpectedVotes(p, spec.K)/v, k/(2*pess-1)/v
	basis = append(basis, fmt.Sprintf("k=%d, valid fraction %g", spec.K, v))

	// One sample's tokens.
	promptBytes, promptBound := int64(plan.DefaultInputTokens*BytesPerToken), int64(0)
	if msgs, err := inst.Prompt(inst.Initial()); err == nil && len(msgs) > 0 {
		promptBytes = 0
		for _, m := range msgs {
			promptBytes += int64(len(m.Content))
		}
		promptBound = PromptTokensBound(msgs)
		basis = append(basis, fmt.Sprintf("prompt of the first state: %d bytes", promptBytes))
	} else {
		promptBound = promptBytes + TokensPerReply + 2*TokensPerMessage
		basis = append(basis, fmt.Sprintf("prompt of %d tokens assumed", plan.DefaultInputTokens))
	}
	promptTokens := float64(promptBytes) / BytesPerToken
	maxOut := float64(spec.MaxOutputTokens)
	var price *schemas.Pricing
	p0, src := Of(prices, &spec, "", false)
	if src != None {
		price = &p0
	}
	cost := func(prompt, out float64) float64 { return usd(price, prompt, out) }
	lowC, expC, highC := cost(promptTokens, math.Min(answerTokens(inst), maxOut)), cost(promptTokens, ExpectedOutputShare*maxOut),
		cost(float64(promptBound), maxOut)
	if in, out := spec.PromptTokensEstimate, spec.CompletionTokensEstimate; in > 0 || out > 0 {
		// A calibration measured what a call uses: the expected figure is
		// that, and the band is widened to hold it.
		if in == 0 {
			in = promptTokens
		}
		if out == 0 {
			out = ExpectedOutputShare * maxOut
		}
		expC = cost(in, out)
		lowC, highC = math.Min(lowC, expC), math.Max(highC, expC)
		basis = append(basis, fmt.Sprintf("tokens per call from the job: %.0f in, %.0f out", in, out))
	} else {
		basis = append(basis, fmt.Sprintf("tokens per call assumed (%.0f%% of max_output_tokens out): calibrate the model for a forecast that holds", 100*ExpectedOutputShare))
	}
	calibrated := spec.PEstimate > 0.5 && spec.CompletionTokensEstimate > 0
	switch src {
	case Fleet:
		basis = append(basis, "priced at the fleet's price")
	case Job:
		basis = append(basis, "priced at the job's own pricing, unverified: the fleet has no price table")
	default:
		basis = append(basis, "no price: no cost")
	}

	s := float64(steps)
	f := schemas.Forecast{
		Steps:           steps,
		SamplesExpected: s * expN,
		CostUSD:         s * expN * expC,
		CostLowUSD:      s * lowN * lowC,
		CostHighUSD:     s * highN * highC,
		Calibrated:      calibrated,
	}
	if q.SamplesPerSecond > 0 {
		f.Seconds = s * expN / q.SamplesPerSecond
		f.SecondsLow = s * lowN / q.SamplesPerSecond
		f.SecondsHigh = s * highN / q.SamplesPerSecond
		basis = append(basis, fmt.Sprintf("time at the tenant's %g samples/s", q.SamplesPerSecond))
	}
	f.Basis = strings.Join(basis, "; ")
	return f
}

// pessimistic is the band's pessimistic p for a given p: its error rate
// doubled, but never below halfway to 0.5 (where nothing converges).
func pessimistic(p float64) float64 {
	return math.Max(1-2*(1-p), 0.5+(p-0.5)/2)
}

// usd is the price of fractional token counts at p.
func usd(p *schemas.Pricing, prompt, out float64) float64 {
	if p == nil {
		return 0
	}
	return (prompt*p.InputUSDPerMTok + out*p.OutputUSDPerMTok) / 1e6
}

// Admit is the admission check at submit. A calibrated forecast holds:
// a job whose budget_usd is below its central cost is refused
// (ErrOverBudget, with the figures). An uncalibrated one is a guess, and
// a guess must not refuse jobs that would fit: only a budget below its
// low end (k samples a step, each the prompt and the bare right answer)
// is refused. Any other job is admitted (it pauses as budget_exhausted
// if it runs out).
func Admit(spec schemas.JobSpec, f schemas.Forecast) error {
	if spec.BudgetUSD <= 0 {
		return nil
	}
	if f.Calibrated && spec.BudgetUSD < f.CostUSD {
		return fmt.Errorf("%w: budget_usd %s below the calibrated forecast %s (from %s to %s; %s)", ErrOverBudget,
			dollars(spec.BudgetUSD), dollars(f.CostUSD), dollars(f.CostLowUSD), dollars(f.CostHighUSD), f.Basis)
	}
	if spec.BudgetUSD < f.CostLowUSD {
		return fmt.Errorf("%w: budget_usd %s below the forecast's lowest cost %s (expected %s, up to %s; %s)", ErrOverBudget,
			dollars(spec.BudgetUSD), dollars(f.CostLowUSD), dollars(f.CostUSD), dollars(f.CostHighUSD), f.Basis)
	}
	return nil
}

// answerTokens is the size of the right answer to inst's first step, in
// tokens at BytesPerToken bytes: its reference vote's key, the answer's
// canonical form (at least 1; 1 without a reference).
func answerTokens(inst task.Instance) float64 {
	r, ok := inst.(task.Referencer)
	if !ok {
		return 1
	}
	v, err := r.ReferenceVote(inst.Initial())
	if err != nil {
		return 1
	}
	return math.Max(1, float64(len(v.Key))/BytesPerToken)
}

// dollars prints an amount with four significant digits.
func dollars(v float64) string { return "$" + strconv.FormatFloat(v, 'g', 4, 64) }
