package judge

import "fmt"

// CallCost returns the price of one call of model: prompt tokens at the
// input price, completion tokens at the output price.
func (s *Settings) CallCost(model string, promptTokens, completionTokens int64) float64 {
	p := s.PriceOf(model)
	return (float64(promptTokens)*p.InputUSDPerMTok + float64(completionTokens)*p.OutputUSDPerMTok) / 1e6
}

// judgePromptTokens bounds the judge's prompt: its own text plus every
// member's answer at its full output allowance.
func (s *Settings) judgePromptTokens(a Assembled, members int) int64 {
	base := EstimateTokens(a.judgeSystem) + EstimateTokens(a.judgeUser(nil))
	return int64(base + members*(s.MemberMaxTokens+64))
}

// Estimate is the worst-case cost of a call on the assembled context
// before it is made: every member's prompt and its full output allowance,
// then one judge call whose prompt holds every answer at full length and
// whose output runs to its allowance, all at the configured prices. A
// judge retry is not in the estimate: it is only made when the budget
// still covers it.
func (s *Settings) Estimate(a Assembled, panel []string, judgeModel string) float64 {
	memberPrompt := int64(EstimateTokens(a.System) + EstimateTokens(a.User))
	var usd float64
	for _, m := range panel {
		usd += s.CallCost(m, memberPrompt, int64(s.MemberMaxTokens))
	}
	usd += s.CallCost(judgeModel, s.judgePromptTokens(a, len(panel)), int64(s.JudgeMaxTokens))
	return usd
}

// Gate decisions.
const (
	GateProceed = "proceed"
	GateHold    = "hold"
	GateRefuse  = "refuse"
)

// Gate applies the cost gate to an estimate for problem type typ and the
// call's budget: above RefuseFactor × the type's threshold it refuses
// (escalate to a human); above the budget it refuses; above ApprovalUSD it
// holds the call for a person unless approved. reason explains anything
// but proceed.
func (s *Settings) Gate(typ string, estimate, budget float64, approved bool) (decision, reason string) {
	return s.gate("the "+typ+" threshold", s.Threshold(typ), estimate, budget, "raise --budget or send less context", approved)
}

// GateType is the problem type whose threshold the cost gate applies to a
// request that declared type declared and whose text and files detect as
// detected: the stricter of the two (the lower threshold; declared on a
// tie). A requester can thus tighten the gate by naming a type, never
// loosen it: a code bug named "architecture" is still priced as a code
// bug. note says which was taken when they differ, for the refusal.
func (s *Settings) GateType(declared, detected string) (typ, note string) {
	if declared == "" || declared == detected || s.Threshold(declared) <= s.Threshold(detected) {
		return firstNonEmpty(declared, detected), ""
	}
	return detected, " (the detected type; the request declared " + declared + ", whose threshold is higher)"
}

// RequestGate is Gate for a break-glass request that declared type
// declared (or none) and detects as detected: the threshold is GateType's.
func (s *Settings) RequestGate(declared, detected string, estimate, budget float64, approved bool) (decision, reason string) {
	typ, note := s.GateType(declared, detected)
	return s.gate("the "+typ+" threshold"+note, s.Threshold(typ), estimate, budget, "raise --budget or send less context", approved)
}

// ArbitrationGate is Gate for an arbitration: the arbitration section's
// threshold, and the call's budget (the section's, or less when the job
// holds less for it: ArbitrationRequest.BudgetUSD).
func (s *Settings) ArbitrationGate(estimate, budget float64, approved bool) (decision, reason string) {
	a := s.Arbitration
	raise := "raise arbitration.budget_usd"
	if budget < a.BudgetUSD {
		raise = "the job holds no more for it: raise its budget or its tenant's spend per day"
	}
	return s.gate("the arbitration threshold", a.Threshold, estimate, budget, raise, approved)
}

func (s *Settings) gate(threshold string, th, estimate, budget float64, raise string, approved bool) (decision, reason string) {
	if limit := s.RefuseFactor * th; estimate > limit {
		return GateRefuse, fmt.Sprintf("estimated cost $%.2f is over %g × %s $%.2f ($%.2f): escalate to a human", estimate, s.RefuseFactor, threshold, th, limit)
	}
	if estimate > budget {
		return GateRefuse, fmt.Sprintf("estimated cost $%.2f is over the call's budget $%.2f (%s)", estimate, budget, raise)
	}
	if estimate > s.ApprovalUSD && !approved {
		return GateHold, fmt.Sprintf("estimated cost $%.2f is over $%.2f: held until a person approves", estimate, s.ApprovalUSD)
	}
	return GateProceed, ""
}
