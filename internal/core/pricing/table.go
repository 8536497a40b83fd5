package pricing

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/makerfleet/makerfleet/schemas"
)

// ErrUnpriced: a job under a limit would ask a model the fleet's price
// table does not price.
var ErrUnpriced = errors.New("pricing: unpriced work")

// Table is the fleet's price table at one moment: the records by model
// and the default record. The zero Table is empty. Safe for concurrent
// reads.
type Table struct {
	models map[string]schemas.ModelPrice
	def    *schemas.ModelPrice
}

// NewTable returns the table of recs (a later record of a model replaces
// an earlier one; records that do not validate are left out).
func NewTable(recs []schemas.ModelPrice) Table {
	t := Table{models: map[string]schemas.ModelPrice{}}
	for _, r := range recs {
		if r.Validate() != nil {
			continue
		}
		if r.Default {
			r := r
			t.def = &r
			continue
		}
		t.models[r.Model] = r
	}
	return t
}

// Empty reports whether the table prices nothing: the operator has set no
// price.
func (t Table) Empty() bool { return t.def == nil && len(t.models) == 0 }

// Price is the table's price of a sample whose request named model ("":
// none, the voters' own model: the default record), and whether it has
// one. A named model has its own record or no price: it never falls back
// to the default record (a stronger model is no cheaper than the voters').
func (t Table) Price(model string) (schemas.Pricing, bool) {
	if model == "" {
		if t.def == nil {
			return schemas.Pricing{}, false
		}
		return t.def.Pricing(), true
	}
	r, ok := t.models[model]
	if !ok {
		return schemas.Pricing{}, false
	}
	return r.Pricing(), true
}

// Records lists the table: the default record first, then by model.
func (t Table) Records() []schemas.ModelPrice {
	out := make([]schemas.ModelPrice, 0, len(t.models)+1)
	if t.def != nil {
		out = append(out, *t.def)
	}
	start := len(out)
	for _, r := range t.models {
		out = append(out, r)
	}
	slices.SortFunc(out[start:], func(a, b schemas.ModelPrice) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// Source is where a sample's price comes from.
type Source uint8

// Sources.
const (
	// None: nobody prices the sample; it costs nothing.
	None Source = iota
	// Fleet: the fleet's price table. Budgets and spend quotas count it.
	Fleet
	// Job: the job's own pricing, on a fleet without a price table. The
	// tenant's claim: reported apart, counted against nothing.
	Job
	// Absent: the fleet has a price table, and it does not price the
	// model; the sample costs nothing (a job under a limit never runs
	// one).
	Absent
)

// Of is the price of a sample of spec whose request named model, and
// where it comes from: the table's price of model (Fleet); else, when the
// table is empty, the job's own (Job: the escalation's stronger_pricing
// for the stronger model asked on its rung, stronger; else the job's
// pricing); else none (Absent when the table prices other models).
func Of(t Table, spec *schemas.JobSpec, model string, stronger bool) (schemas.Pricing, Source) {
	if p, ok := t.Price(model); ok {
		return p, Fleet
	}
	if !t.Empty() {
		return schemas.Pricing{}, Absent
	}
	p := spec.Pricing
	if e := spec.Escalation; stronger && e != nil && e.StrongerPricing != nil {
		p = e.StrongerPricing
	}
	if p == nil {
		return schemas.Pricing{}, None
	}
	return *p, Job
}

// Models lists the models spec's samples may name: "" (the voters' own),
// the escalation's stronger model, and the decorrelation models when the
// job may decorrelate.
func Models(spec *schemas.JobSpec) []string {
	out := []string{""}
	if e := spec.Escalation; e != nil && e.StrongerModel != "" {
		out = append(out, e.StrongerModel)
	}
	if spec.Decorrelating() {
		out = append(out, spec.Models...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Missing lists the models of spec the table does not price, by name
// ("default" for the voters' own model, which the default record prices).
func Missing(t Table, spec *schemas.JobSpec) []string {
	var out []string
	for _, m := range Models(spec) {
		if _, ok := t.Price(m); !ok {
			out = append(out, Name(m))
		}
	}
	return out
}

// Name is how a model is named to people: "default" for the voters' own
// model ("").
func Name(model string) string {
	if model == "" {
		return "default"
	}
	return model
}

// Limited reports whether a limit holds spec to the fleet's prices: a
// budget of its own, or its tenant's spend per day (spendPerDayUSD, from
// its quota).
func Limited(spec *schemas.JobSpec, spendPerDayUSD float64) bool {
	return spec.BudgetUSD > 0 || spendPerDayUSD > 0
}

// Check refuses spec when a limit holds it (Limited) and the table does not
// price every model it may ask: an error wrapping ErrUnpriced that names
// them and the limit. nil otherwise.
func Check(t Table, spec *schemas.JobSpec, spendPerDayUSD float64) error {
	if !Limited(spec, spendPerDayUSD) {
		return nil
	}
	missing := Missing(t, spec)
	if len(missing) == 0 {
		return nil
	}
	return Unpriced(missing, Under(spec.Tenant, spec.BudgetUSD, spendPerDayUSD))
}

// Under names the limits a job is under: its budget (budgetUSD) and its
// tenant's spend per day, each when set.
func Under(tenant string, budgetUSD, spendPerDayUSD float64) string {
	var parts []string
	if budgetUSD > 0 {
		parts = append(parts, fmt.Sprintf("a budget of $%g", budgetUSD))
	}
	if spendPerDayUSD > 0 {
		parts = append(parts, fmt.Sprintf("tenant %s's spend quota of $%g a day", tenant, spendPerDayUSD))
	}
	if len(parts) == 0 {
		return "a limit"
	}
	return strings.Join(parts, " and ")
}

// Unpriced is the error of a job under the limits under asking the
// models missing, which the fleet's table does not price.
func Unpriced(missing []string, under string) error {
	what := "models"
	if len(missing) == 1 {
		what = "model"
	}
	quoted := make([]string, len(missing))
	for i, m := range missing {
		quoted[i] = fmt.Sprintf("%q", m)
	}
	return fmt.Errorf("%w: the fleet's price table prices no %s %s, and a job under %s runs only work the fleet prices (a job's own pricing is not taken); the operator sets prices with maker prices set",
		ErrUnpriced, what, strings.Join(quoted, ", "), under)
}
