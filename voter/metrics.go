package voter

import (
	"context"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/metrics"
)

// timedModel is a Model whose calls are counted in the voter's metrics:
// in flight, latency by model, failures by code (a reply without usage,
// whose tokens are estimated, as code no_usage).
type timedModel struct {
	Model
	met   *metrics.Voter
	model string // the voter's own model, for requests naming none
}

func (t timedModel) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	model := req.Model
	if model == "" {
		model = t.model
	}
	t.met.CallStarted()
	start := time.Now()
	resp, err := t.Model.Complete(ctx, req)
	t.met.CallDone(ctx, model, time.Since(start), err)
	if err == nil && resp.UsageEstimated {
		t.met.NoUsage(model)
	}
	return resp, err
}
