package step

import (
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/schemas"
)

// Pricing (internal/core/pricing): every answer is priced as it is counted, at
// the fleet's price of the model its request named, from the price table
// the coordinator keeps through a watch; never at the job's own pricing,
// which counts only on a fleet without a price table, apart (the report's
// unverified_cost_usd). The model a request named is the fleet's own
// record, not the voter's word: the stronger model on a step its rung
// sampled (strongerAt), a decorrelation model the machine noted when it
// published the request (asked), else the voters' own ("": the table's
// default record). Per-answer pricing keeps a price change from reaching
// back to answers already counted, and the figures (journaled) carry the
// cost to a new owner exactly.

// priceFunc is the price of a sample whose request named model (stronger:
// the escalation's stronger model on its rung) and where it comes from.
type priceFunc func(model string, stronger bool) (schemas.Pricing, pricing.Source)

// sampleAt names one request of a step under an epoch.
type sampleAt struct {
	step, epoch int64
	index       int
}

// noteAsked records the model req names when it is neither the voters'
// own nor the stronger model (those the machine knows by its step): a
// decorrelation model, so that its answer, late ones included, is priced
// as that model's.
func (m *Machine) noteAsked(req *schemas.SampleRequest) {
	if req.Model == "" || m.strongerAt[[2]int64{req.Step, req.Epoch}] {
		return
	}
	if m.asked == nil {
		m.asked = map[sampleAt]string{}
	}
	m.asked[sampleAt{req.Step, req.Epoch, req.Index}] = req.Model
}

// forgetAsked drops what noteAsked kept of steps before the last decided
// one (answers that late are rare: priced as the voters' own model).
func (m *Machine) forgetAsked() {
	for at := range m.asked {
		if at.step < m.Step-1 {
			delete(m.asked, at)
		}
	}
}

// requestModel is the model res's request named ("": the voters' own).
func (m *Machine) requestModel(res *schemas.SampleResult, stronger bool) string {
	if stronger {
		return m.policy().StrongerModel
	}
	return m.asked[sampleAt{res.Step, res.Epoch, res.Index}]
}

// priceTokens adds (positive counts) or takes back (negative) what an
// answer's tokens cost to the figures, and returns the fleet-priced part
// in nano-dollars (for the metrics): the fleet's price goes to
// SampleCostNanoUSD, the job's own claim to UnverifiedCostNanoUSD, and
// tokens nobody prices count nothing (said once per model and run when
// the fleet prices other models).
func (m *Machine) priceTokens(res *schemas.SampleResult, stronger bool, prompt, completion, cached int64) pricing.Nano {
	if m.price == nil || prompt == 0 && completion == 0 {
		return 0
	}
	model := m.requestModel(res, stronger)
	p, src := m.price(model, stronger)
	sign := int64(1)
	if prompt < 0 || completion < 0 {
		sign, prompt, completion, cached = -1, -prompt, -completion, -cached
	}
	n := sign * int64(pricing.CostCached(&p, prompt, cached, completion))
	f := &m.Acct.Figures
	switch src {
	case pricing.Fleet:
		f.SampleCostNanoUSD = max(f.SampleCostNanoUSD+n, 0)
		return pricing.Nano(n)
	case pricing.Job:
		f.UnverifiedCostNanoUSD = max(f.UnverifiedCostNanoUSD+n, 0)
	case pricing.Absent:
		if !m.unpricedSeen[model] {
			if m.unpricedSeen == nil {
				m.unpricedSeen = map[string]bool{}
			}
			m.unpricedSeen[model] = true
			m.log.Warn("the fleet's price table prices no such model: its samples count no cost (maker prices set)",
				"model", pricing.Name(model))
		}
	}
	return 0
}

// ReportCost is what the figures cost at the fleet's prices (answers and
// arbitrations), and at the job's own unverified ones, in dollars.
func ReportCost(f *schemas.Figures) (cost, unverified float64) {
	return pricing.Nano(f.SampleCostNanoUSD).USD() + f.ArbiterCostUSD, pricing.Nano(f.UnverifiedCostNanoUSD).USD()
}
