package providers

import (
	"context"
	"errors"
	"fmt"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
)

// CheckResult is what checking one deployment found.
type CheckResult struct {
	Name    string `json:"name"`
	Model   string `json:"model"`
	BaseURL string `json:"base_url"`
	// OK: the provider serves the model to the key.
	OK bool `json:"ok"`
	// Detail says how it was learnt, or what failed.
	Detail string `json:"detail"`
	Err    error  `json:"-"`
}

// Check asks a deployment whether it serves its model to its key, from
// this machine: the key where the record says, GET /models, and, when the
// list does not name the model, a one-token call (llm.Client.Probe).
// tmpl is the model client's template (timeouts, attempts).
func Check(ctx context.Context, d schemas.Deployment, keys KeySource, tmpl llm.Config) CheckResult {
	res := CheckResult{Name: d.Name, Model: d.Model, BaseURL: d.BaseURL}
	fail := func(err error) CheckResult {
		res.Err, res.Detail = err, err.Error()
		return res
	}
	key, err := keys.Key(&d)
	if err != nil {
		return fail(err)
	}
	tmpl.BaseURL, tmpl.APIKey, tmpl.Model = d.BaseURL, key, d.Upstream()
	c, err := llm.New(tmpl)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	err = c.Check(ctx)
	switch {
	case err == nil:
		res.OK, res.Detail = true, fmt.Sprintf("GET /models lists %q", d.Upstream())
	case errors.Is(err, llm.ErrModelNotListed):
		if perr := c.Probe(ctx); perr != nil {
			return fail(fmt.Errorf("a one-token call: %w (and %w)", perr, err))
		}
		res.OK, res.Detail = true, fmt.Sprintf("not listed by GET /models, but a one-token call to %q is answered", d.Upstream())
	default:
		return fail(fmt.Errorf("GET /models: %w", err))
	}
	return res
}
