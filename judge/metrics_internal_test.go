package judge

import (
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestRefusalReason: a refusal's text maps to a short label by the gate
// that wrote it; an answer has none.
func TestRefusalReason(t *testing.T) {
	for _, tc := range []struct{ outcome, reason, want string }{
		{schemas.BreakGlassAnswered, "", ""},
		{schemas.BreakGlassRefused, `missing trigger: the problem must start with "break glass:"`, "missing_trigger"},
		{schemas.BreakGlassRefused, "recursion guard: a request made from inside a panel", "recursion_guard"},
		{schemas.BreakGlassRefused, "tenant mismatch: the request names tenant", "tenant_mismatch"},
		{schemas.BreakGlassRefused, "prior attempts missing: break glass only after", "prior_attempts_missing"},
		{schemas.BreakGlassRefused, "not a valid arbitration request: x", "invalid_request"},
		{schemas.BreakGlassRefused, "estimated cost $9.00 is over the call's budget $1.00", "cost"},
		{schemas.BreakGlassRefused, "session limit: 3 of 3 calls already made in 1h", "limit"},
		{schemas.BreakGlassRefused, "tenant cap: $10.00 spent or reserved in 24h", "cap"},
		{schemas.BreakGlassRefused, "something new", "other"},
	} {
		if got := refusalReason(tc.outcome, tc.reason); got != tc.want {
			t.Errorf("refusalReason(%s, %q) = %q, want %q", tc.outcome, tc.reason, got, tc.want)
		}
	}
}
