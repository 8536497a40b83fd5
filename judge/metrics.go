package judge

import (
	"strings"

	"github.com/makerfleet/makerfleet/schemas"
)

// The kind label of maker_judge_calls_total.
const (
	metricKindBreakGlass  = "break_glass"
	metricKindArbitration = "arbitration"
)

// refusalReasons sort a refusal's text into a short label, by the gate
// that wrote it (first match wins).
var refusalReasons = []struct{ contains, label string }{
	{"tenant mismatch", "tenant_mismatch"},
	{"recursion guard", "recursion_guard"},
	{"missing trigger", "missing_trigger"},
	{"prior attempts missing", "prior_attempts_missing"},
	{"not a valid arbitration request", "invalid_request"},
	{"estimated cost", "cost"},
	{" limit: ", "limit"},
	{" cap: ", "cap"},
	{"model", "model_not_allowed"},
}

// refusalReason is the maker_judge_refusals_total label of a request
// finished with outcome for reason: "" when it was not refused.
func refusalReason(outcome, reason string) string {
	if outcome != schemas.BreakGlassRefused {
		return ""
	}
	r := strings.ToLower(reason)
	for _, rr := range refusalReasons {
		if strings.Contains(r, rr.contains) {
			return rr.label
		}
	}
	return "other"
}
