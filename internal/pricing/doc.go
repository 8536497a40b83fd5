// Package pricing is the fleet's price table: what each model's tokens
// cost, set by the operator, and the one rule every part of the fleet
// prices a sample by.
//
// The table lives in the KV bucket maker_prices (bus.Namespace.PricesBucket),
// one schemas.ModelPrice per model under "model.<bus.SafeKey(model)>" and
// the default record under "default". Only the operator writes it (maker
// prices set, PUT /v1/prices/{model}; internal/auth: the admin and the api
// identity, never a coordinator, voter or tenant); coordinators keep it in
// memory through a watch (Cache), so a change applies within a second.
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
// cost is ErrOverBudget), and the token bounds of one chat call
// (PromptTokensBound) that bound a sample's claim. They need no Redis, so
// the public client links them without the quota engine.
package pricing
