// Package plan is the one home of MAKER's math (arXiv 2511.09030, §2 of
// MAKER-FACTS): the planning formulas here, adaptive k and the correlation
// test in reliability.go, the exact binomial interval of calibration in
// interval.go. Pure functions, no I/O.
//
// The planning formulas: how large the voting margin k must be for a run
// of s steps to succeed with probability t, and what that costs. `maker plan` prints a Plan;
// the coordinator's report uses the same numbers.
//
// With p the chance that one valid sample is right and r = (1−p)/p, voting
// first-to-ahead-by-k is a random walk between −k and +k, so (two-candidate
// race, the pessimistic case):
//
//   - p_vote = 1/(1+r^k): a step is decided right;
//   - p_full = p_vote^s: every step is;
//   - k_min = ⌈ln(t^(−1/s) − 1)/ln r⌉: the smallest k with p_full ≥ t, Θ(ln s);
//   - E[N] = k/(2p−1)·(1−r^k)/(1+r^k): expected valid votes a step, at most
//     the paper's shortcut k/(2p−1);
//   - E[cost] = c·s·E[N]/v, with c the price of one call (input and output
//     tokens) and v the share of samples that survive red-flagging.
//
// Only p > 0.5 converges: at p ≤ 0.5 a wrong answer is as likely to win as a
// right one and no margin helps, so Compute refuses such input.
package plan

import (
	"errors"
	"fmt"
	"math"
	"math/big"
)

// ErrInvalid is wrapped by every error about bad input.
var ErrInvalid = errors.New("plan: invalid input")

// Defaults Compute applies to zero fields of Input.
const (
	DefaultTarget        = 0.95
	DefaultValidFraction = 1.0
	// DefaultInputTokens is the paper's count of about 600 input tokens a
	// call (strategy, previous move, state). Cost projections only match the
	// paper's run when input tokens are counted.
	DefaultInputTokens = 600
	// DefaultOutputTokens is a typical short reasoned answer; the real figure
	// depends on the model, so measure it and pass it in.
	DefaultOutputTokens = 300
)

// MaxDisks is the largest Hanoi disk count Steps accepts (as task/hanoi).
const MaxDisks = 30

// maxK bounds k_min: a larger margin means p is so close to 0.5 that the
// run is hopeless, and int conversion would be unsafe.
const maxK = 1 << 30

// Input is what a plan is computed from. Zero fields take the documented
// defaults.
type Input struct {
	// P is the chance one valid sample is right; it must be in (0.5, 1).
	P float64
	// Steps is the number of steps s, at least 1.
	Steps int64
	// Target is the wanted whole-task success t in (0, 1); 0 means 0.95.
	Target float64
	// K is the margin to evaluate; 0 means k_min.
	K int
	// ValidFraction is v in (0, 1], the share of samples that pass the red
	// flags; 0 means 1.
	ValidFraction float64
	// InputTokens is the prompt size of one call; 0 means 600, the paper's
	// count.
	InputTokens int
	// OutputTokens is the reply size of one call; 0 means 300. It is
	// model-specific: measure it.
	OutputTokens int
	// InputUSDPerMTok and OutputUSDPerMTok are prices in USD per million
	// tokens, at least 0; with both 0 every cost is 0.
	InputUSDPerMTok  float64
	OutputUSDPerMTok float64
}

// Plan is the outcome of Compute. Probabilities and vote counts are for the
// two-candidate race, the pessimistic case.
type Plan struct {
	// P is the per-sample success probability used.
	P float64 `json:"p"`
	// Steps is the number of steps s.
	Steps int64 `json:"steps"`
	// Target is the wanted whole-task success t, after defaults.
	Target float64 `json:"target"`
	// ValidFraction is v, after defaults.
	ValidFraction float64 `json:"valid_fraction"`
	// KMin is the smallest margin with p_full ≥ Target.
	KMin int `json:"k_min"`
	// K is the margin the rest of the plan is for: Input.K, or KMin.
	K int `json:"k"`
	// MeetsTarget reports K ≥ KMin.
	MeetsTarget bool `json:"meets_target"`
	// PVote is the chance one step is decided right with margin K.
	PVote float64 `json:"p_vote"`
	// PFull is the chance all Steps are decided right with margin K.
	PFull float64 `json:"p_full"`
	// PFullKMin is PFull for margin KMin.
	PFullKMin float64 `json:"p_full_k_min"`
	// ExpectedVotesPerStep is E[N], the mean number of valid votes a step.
	ExpectedVotesPerStep float64 `json:"expected_votes_per_step"`
	// ShortcutVotesPerStep is the paper's upper estimate k/(2p−1).
	ShortcutVotesPerStep float64 `json:"shortcut_votes_per_step"`
	// ExpectedSamplesPerStep is E[N]/v: red-flagged samples are paid for too.
	ExpectedSamplesPerStep float64 `json:"expected_samples_per_step"`
	// ExpectedTotalSamples is Steps·E[N]/v, the expected number of calls.
	ExpectedTotalSamples float64 `json:"expected_total_samples"`
	// InputTokens and OutputTokens are the per-call token counts used.
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// InputUSDPerMTok and OutputUSDPerMTok are the prices used, USD per
	// million tokens.
	InputUSDPerMTok  float64 `json:"input_usd_per_mtok"`
	OutputUSDPerMTok float64 `json:"output_usd_per_mtok"`
	// CostPerCallUSD is c, the price of one call's input and output tokens.
	CostPerCallUSD float64 `json:"cost_per_call_usd"`
	// ExpectedCost is c·s·E[N]/v in USD.
	ExpectedCost float64 `json:"expected_cost"`
	// CallsPerStepWithN and ExpectedCostWithN are the model calls a step
	// takes and the cost when a wave's samples after the step's first
	// are drawn in one call with n (the prompt paid once a call): the
	// first sample alone, the rest of the first wave in one call, and
	// each later sample (a top-up, typically one) in one more:
	// 2 + max(0, E[N]/v − k) calls; every sample's output paid.
	CallsPerStepWithN float64 `json:"calls_per_step_with_n"`
	ExpectedCostWithN float64 `json:"expected_cost_with_n"`
}

// Compute validates in, applies defaults and returns the plan. Every error
// wraps ErrInvalid.
func Compute(in Input) (Plan, error) {
	if in.Target == 0 {
		in.Target = DefaultTarget
	}
	if in.ValidFraction == 0 {
		in.ValidFraction = DefaultValidFraction
	}
	if in.InputTokens == 0 {
		in.InputTokens = DefaultInputTokens
	}
	if in.OutputTokens == 0 {
		in.OutputTokens = DefaultOutputTokens
	}
	if err := checkP(in.P); err != nil {
		return Plan{}, err
	}
	if err := checkSteps(in.Steps); err != nil {
		return Plan{}, err
	}
	if err := checkTarget(in.Target); err != nil {
		return Plan{}, err
	}
	if in.K < 0 {
		return Plan{}, fmt.Errorf("%w: margin k = %d must be at least 1 (or 0 for k_min)", ErrInvalid, in.K)
	}
	if v := in.ValidFraction; math.IsNaN(v) || v <= 0 || v > 1 {
		return Plan{}, fmt.Errorf("%w: valid fraction v = %v must be in (0, 1]", ErrInvalid, v)
	}
	if in.InputTokens < 0 || in.OutputTokens < 0 {
		return Plan{}, fmt.Errorf("%w: token counts must not be negative (input %d, output %d)", ErrInvalid, in.InputTokens, in.OutputTokens)
	}
	for _, price := range []float64{in.InputUSDPerMTok, in.OutputUSDPerMTok} {
		if math.IsNaN(price) || math.IsInf(price, 0) || price < 0 {
			return Plan{}, fmt.Errorf("%w: token prices must be finite and at least 0 (input %v, output %v)", ErrInvalid, in.InputUSDPerMTok, in.OutputUSDPerMTok)
		}
	}

	kmin, err := KMin(in.P, in.Steps, in.Target)
	if err != nil {
		return Plan{}, err
	}
	k := in.K
	if k == 0 {
		k = kmin
	}
	en := ExpectedVotes(in.P, k)
	c := (float64(in.InputTokens)*in.InputUSDPerMTok + float64(in.OutputTokens)*in.OutputUSDPerMTok) / 1e6
	callsN := math.Min(en/in.ValidFraction, 2+math.Max(0, en/in.ValidFraction-float64(k)))
	s := float64(in.Steps)
	return Plan{
		P:                      in.P,
		Steps:                  in.Steps,
		Target:                 in.Target,
		ValidFraction:          in.ValidFraction,
		KMin:                   kmin,
		K:                      k,
		MeetsTarget:            k >= kmin,
		PVote:                  PVote(in.P, k),
		PFull:                  PFull(in.P, k, in.Steps),
		PFullKMin:              PFull(in.P, kmin, in.Steps),
		ExpectedVotesPerStep:   en,
		ShortcutVotesPerStep:   float64(k) / (2*in.P - 1),
		ExpectedSamplesPerStep: en / in.ValidFraction,
		ExpectedTotalSamples:   s * en / in.ValidFraction,
		InputTokens:            in.InputTokens,
		OutputTokens:           in.OutputTokens,
		InputUSDPerMTok:        in.InputUSDPerMTok,
		OutputUSDPerMTok:       in.OutputUSDPerMTok,
		CostPerCallUSD:         c,
		ExpectedCost:           c * s * en / in.ValidFraction,
		CallsPerStepWithN:      callsN,
		ExpectedCostWithN:      s * (callsN*float64(in.InputTokens)*in.InputUSDPerMTok + en/in.ValidFraction*float64(in.OutputTokens)*in.OutputUSDPerMTok) / 1e6,
	}, nil
}

// KMin returns the smallest margin k ≥ 1 with p_full ≥ target for steps
// steps: ⌈ln(t^(−1/s) − 1)/ln r⌉. Unlike Compute it applies no default:
// target must be in (0, 1).
//
// The closed form is evaluated in float64, then the answer is settled by
// the defining inequality in 256-bit arithmetic: a quotient whose exact value
// is at most 3 gives 3 even if float64 rounds it to 3.0000000000000004, and
// one whose exact value is 3.0000000001 gives 4. A snapping epsilon could
// not tell those apart.
func KMin(p float64, steps int64, target float64) (int, error) {
	if err := checkP(p); err != nil {
		return 0, err
	}
	if err := checkSteps(steps); err != nil {
		return 0, err
	}
	if err := checkTarget(target); err != nil {
		return 0, err
	}
	// r^k ≤ t^(−1/s) − 1 = expm1(−ln t / s); expm1 keeps the tiny value for
	// large s that 1 − 1 would cancel to 0.
	x := math.Expm1(-math.Log(target) / float64(steps))
	kf := math.Log(x) / logR(p)
	if kf > maxK {
		return 0, fmt.Errorf("%w: p = %v is so close to 0.5 that k_min exceeds %d", ErrInvalid, p, maxK)
	}
	k := 1
	if kf > 1 { // kf ≤ 0 when t^(−1/s) − 1 ≥ 1: a single vote already suffices
		k = int(math.Ceil(kf))
	}
	// The float estimate is off by at most one at an integer boundary.
	for k > 1 && meets(p, k-1, steps, target) {
		k--
	}
	for !meets(p, k, steps, target) {
		k++
	}
	return k, nil
}

// PVote returns 1/(1+r^k), the chance that first-to-ahead-by-k picks the
// right answer in a two-candidate race. It returns NaN unless p is in
// (0.5, 1) and k ≥ 0.
func PVote(p float64, k int) float64 {
	if checkP(p) != nil || k < 0 {
		return math.NaN()
	}
	return 1 / (1 + rPow(p, k))
}

// PFull returns p_vote^steps, computed as exp(−s·log1p(r^k)) so that it
// stays accurate when r^k is tiny and s is large. It returns NaN unless p
// is in (0.5, 1), k ≥ 0 and steps ≥ 0.
func PFull(p float64, k int, steps int64) float64 {
	if checkP(p) != nil || k < 0 || steps < 0 {
		return math.NaN()
	}
	return math.Exp(-float64(steps) * math.Log1p(rPow(p, k)))
}

// ExpectedVotes returns E[N] = k/(2p−1)·(1−r^k)/(1+r^k), the mean number of
// valid votes a two-candidate race takes to decide with margin k. It
// returns NaN unless p is in (0.5, 1) and k ≥ 0.
func ExpectedVotes(p float64, k int) float64 {
	if checkP(p) != nil || k < 0 {
		return math.NaN()
	}
	// (1−r^k)/(1+r^k) = tanh(−k·ln r/2), accurate also when r^k is near 1.
	return float64(k) / (2*p - 1) * math.Tanh(-float64(k)*logR(p)/2)
}

// Steps returns the step count of Towers of Hanoi with disks disks: 2^n − 1.
func Steps(disks int) (int64, error) {
	if disks < 1 || disks > MaxDisks {
		return 0, fmt.Errorf("%w: disks = %d must be between 1 and %d", ErrInvalid, disks, MaxDisks)
	}
	return int64(1)<<disks - 1, nil
}

func checkP(p float64) error {
	switch {
	case math.IsNaN(p) || math.IsInf(p, 0):
		return fmt.Errorf("%w: p = %v is not a probability", ErrInvalid, p)
	case p <= 0.5:
		return fmt.Errorf("%w: p = %v: voting does not converge when a sample is no more likely right than wrong; p must be above 0.5", ErrInvalid, p)
	case p >= 1:
		return fmt.Errorf("%w: p = %v must be below 1: no sample is certain, and r = (1−p)/p would be 0", ErrInvalid, p)
	}
	return nil
}

func checkSteps(s int64) error {
	if s < 1 {
		return fmt.Errorf("%w: steps = %d must be at least 1", ErrInvalid, s)
	}
	return nil
}

func checkTarget(t float64) error {
	if math.IsNaN(t) || t <= 0 || t >= 1 {
		return fmt.Errorf("%w: target = %v must be in (0, 1)", ErrInvalid, t)
	}
	return nil
}

// logR returns ln r = ln((1−p)/p) as log1p((1−2p)/p): 1−2p is exact for
// p in (0.5, 1), so the result keeps full relative precision even for p
// near 0.5, where (1−p)/p is near 1.
func logR(p float64) float64 {
	return math.Log1p((1 - 2*p) / p)
}

// rPow returns r^k.
func rPow(p float64, k int) float64 {
	return math.Exp(float64(k) * logR(p))
}

// meets reports whether margin k reaches target exactly: p_vote^s ≥ t with
// p_vote = p^k/(p^k + (1−p)^k), p and t taken as the exact binary values
// they hold. This form has no 1/p: for k = 1 p_vote is p itself, so a
// target equal to p^s (possible when p^s fits a float64) is met, as it
// should be. Otherwise, at 256 bits the rounding error, about s·2^−250, is
// far below any gap between float64 values.
func meets(p float64, k int, steps int64, target float64) bool {
	const prec = 256
	bp := newFloat(prec).SetFloat64(p)
	bq := newFloat(prec).Sub(newFloat(prec).SetInt64(1), bp) // exact
	pk := powFloat(bp, uint64(k))
	pv := newFloat(prec).Add(pk, powFloat(bq, uint64(k)))
	pv.Quo(pk, pv)
	return powFloat(pv, uint64(steps)).Cmp(newFloat(prec).SetFloat64(target)) >= 0
}

func newFloat(prec uint) *big.Float { return new(big.Float).SetPrec(prec) }

// powFloat returns x^n by squaring, at x's precision.
func powFloat(x *big.Float, n uint64) *big.Float {
	prec := x.Prec()
	out := newFloat(prec).SetInt64(1)
	sq := newFloat(prec).Set(x)
	for n > 0 {
		if n&1 == 1 {
			out.Mul(out, sq)
		}
		n >>= 1
		if n > 0 {
			sq.Mul(sq, sq)
		}
	}
	return out
}
