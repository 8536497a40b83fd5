// Package pricing is money and prices, pure: what each model's tokens
// cost (a Table of the operator's records), the one rule every part of the
// fleet prices a sample by, and money as Redis keeps it (Nano).
//
// Where the table is stored (KV maker_prices) and how processes keep it
// current is internal/pricetable's; this package does no I/O, so the step
// machine and the public client link it.
//
// A sample is priced by the model its request named: the escalation's
// stronger model on its rung, a decorrelation model, or, when its request
// names none (the voters' own model), the default record (Of). A job's own
// pricing (schemas.JobSpec.Pricing, escalation.stronger_pricing) is the
// tenant's claim: it prices a sample only on a fleet without a price table
// (Source Job, the report's unverified_cost_usd), and never counts against
// a budget or a spend quota. A job under a limit (budget_usd, or its
// tenant's spend_per_day) runs only work the table prices (Check): it is
// refused at submit, and a coordinator pauses it when a price it needs
// goes.
//
// What a job will cost at those prices is here too: Forecast (the expected
// cost and its band, from internal/core/plan's formulas, the task's steps
// and the prompt's size) and Admit (a budget below the forecast's lowest
// cost is ErrOverBudget), the token bounds of one chat call
// (PromptTokensBound) that bound a sample's claim, and a call's cost at a
// price (Cost, SampleBound), rounded up to a whole nano-dollar.
package pricing
