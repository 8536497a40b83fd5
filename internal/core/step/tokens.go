package step

import "github.com/makerfleet/makerfleet/internal/core/pricing"

// tokenTally is the tokens of a job's answers by model and by whether the
// escalation's stronger model was asked, and what of them was counted in
// the metrics. Off (the zero value) it tallies nothing.
type tokenTally struct {
	On      bool
	byModel map[tokenKey]*tokenCount
}

type tokenKey struct {
	model    string
	stronger bool
}

type tokenCount struct {
	prompt, completion, sentPrompt, sentCompletion int64
	cost, sentCost                                 pricing.Nano
}

// add adds (or, negative, takes back) an answer's tokens and what the
// fleet priced them at.
func (t *tokenTally) add(model string, stronger bool, prompt, completion int64, cost pricing.Nano) {
	if !t.On {
		return
	}
	if model == "" {
		model = "unknown"
	}
	k := tokenKey{model, stronger}
	c := t.byModel[k]
	if c == nil {
		if t.byModel == nil {
			t.byModel = map[tokenKey]*tokenCount{}
		}
		c = &tokenCount{}
		t.byModel[k] = c
	}
	c.prompt += prompt
	c.completion += completion
	c.cost += cost
}

// Drain hands fn what grew since the last drain. A count that went down
// (tokens taken back) stays pending, set off against later ones: a
// counter never goes down.
func (t *tokenTally) Drain(fn func(model string, prompt, completion int64, cost pricing.Nano)) {
	for k, c := range t.byModel {
		p, cc, usd := max(c.prompt-c.sentPrompt, 0), max(c.completion-c.sentCompletion, 0), max(c.cost-c.sentCost, 0)
		if p == 0 && cc == 0 && usd == 0 {
			continue
		}
		c.sentPrompt += p
		c.sentCompletion += cc
		c.sentCost += usd
		fn(k.model, p, cc, usd)
	}
}
