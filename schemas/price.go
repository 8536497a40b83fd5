package schemas

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// KindModelPrice is the kind of one record of the fleet's price table
// (bucket maker_prices).
const KindModelPrice = "model_price"

// MaxModelPriceUSDPerMTok bounds a price in the fleet's table, in US
// dollars per million tokens: far above any model's list price, so a
// larger figure is a typo (or an attack on the tenants' bills).
const MaxModelPriceUSDPerMTok = 10_000

// ModelPrice is what the fleet charges for one model's tokens: a record
// of its price table, which only the operator writes (maker prices set,
// PUT /v1/prices/{model}) and every coordinator reads live. A sample is
// priced by the model its request named (the escalation's stronger
// model, a decorrelation model), or, when its request names none (the
// voters' own model), by the Default record; never by a price a job
// claims (JobSpec.Pricing).
type ModelPrice struct {
	Header
	// Model is a model name as a sample request names it: 1 to 200 bytes
	// of UTF-8 without control characters or spaces around. Empty for
	// the default record.
	Model string `json:"model,omitempty"`
	// Default marks the record that prices samples whose request names no
	// model: those the voters answer with their own model.
	Default bool `json:"default,omitempty"`
	// InputUSDPerMTok prices prompt tokens, OutputUSDPerMTok completion
	// tokens, in US dollars per million: finite, from 0 to
	// MaxModelPriceUSDPerMTok.
	InputUSDPerMTok  float64 `json:"input_usd_per_mtok" jsonschema:"minimum=0,maximum=10000"`
	OutputUSDPerMTok float64 `json:"output_usd_per_mtok" jsonschema:"minimum=0,maximum=10000"`
	// CachedInputUSDPerMTok prices prompt tokens a provider served from
	// its prompt cache (0: at InputUSDPerMTok); at most InputUSDPerMTok.
	CachedInputUSDPerMTok float64 `json:"cached_input_usd_per_mtok,omitempty" jsonschema:"minimum=0,maximum=10000"`
	// UpdatedAt is when the record was set.
	UpdatedAt time.Time `json:"updated_at"`
}

// MessageKind implements Message.
func (*ModelPrice) MessageKind() string { return KindModelPrice }

// Validate implements Message.
func (p *ModelPrice) Validate() error {
	const k = KindModelPrice
	if err := p.Header.check(k); err != nil {
		return err
	}
	if p.Default {
		if p.Model != "" {
			return invalid(k, "the default record names no model, got %q", p.Model)
		}
	} else if err := CheckModelName(p.Model); err != nil {
		return err
	}
	if !inRange(p.InputUSDPerMTok, 0, MaxModelPriceUSDPerMTok) {
		return invalid(k, "input_usd_per_mtok must be between 0 and %d, got %v", MaxModelPriceUSDPerMTok, p.InputUSDPerMTok)
	}
	if !inRange(p.OutputUSDPerMTok, 0, MaxModelPriceUSDPerMTok) {
		return invalid(k, "output_usd_per_mtok must be between 0 and %d, got %v", MaxModelPriceUSDPerMTok, p.OutputUSDPerMTok)
	}
	if !inRange(p.CachedInputUSDPerMTok, 0, p.InputUSDPerMTok) {
		return invalid(k, "cached_input_usd_per_mtok must be between 0 and input_usd_per_mtok %v, got %v", p.InputUSDPerMTok, p.CachedInputUSDPerMTok)
	}
	return nil
}

// Pricing is the record's price.
func (p ModelPrice) Pricing() Pricing {
	return Pricing{InputUSDPerMTok: p.InputUSDPerMTok, OutputUSDPerMTok: p.OutputUSDPerMTok, CachedInputUSDPerMTok: p.CachedInputUSDPerMTok}
}

// Name is the record's model, or "default" for the default record.
func (p ModelPrice) Name() string {
	if p.Default {
		return "default"
	}
	return p.Model
}

// CheckModelName checks a model name as the price table keeps it: 1 to
// maxModelName bytes of UTF-8, no control character, no space around.
func CheckModelName(model string) error {
	switch {
	case model == "":
		return invalid(KindModelPrice, "model is empty (the default record sets default instead)")
	case len(model) > maxModelName:
		return invalid(KindModelPrice, "model is %d bytes, over %d", len(model), maxModelName)
	case !utf8.ValidString(model):
		return invalid(KindModelPrice, "model is not UTF-8")
	case strings.ContainsFunc(model, unicode.IsControl):
		return invalid(KindModelPrice, "model %q holds a control character", model)
	case strings.TrimSpace(model) != model:
		return invalid(KindModelPrice, "model %q has spaces around it", model)
	}
	return nil
}

// PriceList is the fleet's price table as GET /v1/prices answers it: the
// default record (if set) first, then by model.
type PriceList struct {
	Prices []ModelPrice `json:"prices"`
}
