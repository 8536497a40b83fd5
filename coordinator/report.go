package coordinator

import (
	"github.com/makerfleet/makerfleet/internal/plan"
	"github.com/makerfleet/makerfleet/schemas"
)

// fillTheory sets the report's expected figures from MAKER's formulas when
// the job carries a p estimate.
func fillTheory(rep *schemas.JobReport, spec schemas.JobSpec) {
	if spec.PEstimate <= 0.5 || spec.PEstimate >= 1 {
		return
	}
	v := spec.ValidFraction
	if v <= 0 || v > 1 {
		v = 1
	}
	votes := plan.ExpectedVotes(spec.PEstimate, spec.K)
	rep.ExpectedVotesPerStep = votes
	rep.ExpectedSamplesPerStep = votes / v
}
