package pricing

import (
	"math"
	"strconv"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Nano is an amount of money in nano-dollars (10⁻⁹ USD). Redis keeps it as
// an integer; Lua reads it exactly up to 2⁵³ (about 9 million dollars,
// above schemas.MaxBudgetUSD).
type Nano int64

// USD converts a limit in dollars to Nano, rounding down: a limit is never
// raised by rounding.
func USD(usd float64) Nano {
	if !(usd > 0) {
		return 0
	}
	return Nano(math.Floor(usd*1e9 + 1e-6))
}

// USDUp converts a cost in dollars to Nano, rounding up: a cost is never
// lowered by rounding (0 for anything not above 0).
func USDUp(usd float64) Nano {
	if !(usd > 0) {
		return 0
	}
	return Nano(math.Ceil(usd*1e9 - 1e-6))
}

// USD is n in dollars.
func (n Nano) USD() float64 { return float64(n) / 1e9 }

// String prints n in dollars.
func (n Nano) String() string { return "$" + strconv.FormatFloat(n.USD(), 'f', -1, 64) }

// Cost is the price of the token counts at p (nil: free), rounded up to a
// whole nano-dollar: a cost is never lowered by rounding.
func Cost(p *schemas.Pricing, prompt, completion int64) Nano {
	if p == nil {
		return 0
	}
	// USD per million tokens = 1000 nano-dollars per token.
	return Nano(math.Ceil((float64(prompt)*p.InputUSDPerMTok + float64(completion)*p.OutputUSDPerMTok) * 1e3))
}

// CostCached is Cost of prompt tokens of which cached were served from
// the provider's cache: those at p's cached price (its input price when
// it has none); cached is at most prompt.
func CostCached(p *schemas.Pricing, prompt, cached, completion int64) Nano {
	if p == nil {
		return 0
	}
	cached = min(max(cached, 0), prompt)
	in := p.CachedInputUSDPerMTok
	if in <= 0 || in > p.InputUSDPerMTok {
		in = p.InputUSDPerMTok
	}
	return Nano(math.Ceil((float64(prompt-cached)*p.InputUSDPerMTok + float64(cached)*in + float64(completion)*p.OutputUSDPerMTok) * 1e3))
}

// SampleBound is an upper bound of what one model call for msgs can cost
// at p: the prompt's bound and maxOutput completion tokens (the voter
// sends it as max_tokens).
func SampleBound(p *schemas.Pricing, msgs []task.Message, maxOutput int) Nano {
	return Cost(p, PromptTokensBound(msgs), int64(maxOutput))
}
