package calibrate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/schemas"
)

// Find returns the calibration a job of task should take on model: the
// one of promptVersion when given (PromptVersion of the job's task and
// params, for a built-in task), else the newest stored for the model and
// task. None is ErrNotFound, saying which prompt versions are stored.
func Find(ctx context.Context, kv jetstream.KeyValue, task, model, promptVersion string) (schemas.Calibration, error) {
	if promptVersion != "" {
		c, err := Lookup(ctx, kv, task, model, promptVersion)
		if err == nil || !errors.Is(err, ErrNotFound) {
			return c, err
		}
	}
	if kv == nil {
		return schemas.Calibration{}, ErrNotFound
	}
	list, lerr := List(ctx, kv)
	var best *schemas.Calibration
	var others []string
	for i, c := range list {
		if c.Task != task || c.Model != model {
			continue
		}
		others = append(others, c.PromptVersion)
		if promptVersion == "" && (best == nil || c.MeasuredAt.After(best.MeasuredAt)) {
			best = &list[i]
		}
	}
	if best != nil {
		return *best, nil
	}
	what := ""
	if promptVersion != "" {
		what += " for prompt " + promptVersion
	}
	if len(others) > 0 {
		what += " (stored for prompts " + strings.Join(others, ", ") + ")"
	}
	if lerr != nil {
		what += fmt.Sprintf(" (%v)", lerr)
	}
	return schemas.Calibration{}, fmt.Errorf("%w of %s on %s%s", ErrNotFound, clip(model, 60), task, what)
}

// P is the p a job takes from c, and where it comes from: c's estimate,
// or its interval's lower end when no valid sample was wrong (an estimate
// of 1 would make voting look free).
func P(c schemas.Calibration) (float64, string) {
	src := fmt.Sprintf("calibration %s n=%d (%s, prompt %s, p in [%.4g, %.4g] at %g %%)",
		c.MeasuredAt.Format(time.DateOnly), c.Samples, clip(c.Model, 60), c.PromptVersion, c.PLow, c.PHigh, 100*c.Confidence)
	if c.P >= 1 {
		return c.PLow, src + ", its lower end: no valid sample was wrong"
	}
	return c.P, src
}

// Apply gives spec what c measured: p (P), the valid fraction and the
// tokens of a call, which its forecast and k then take.
func Apply(spec *schemas.JobSpec, c schemas.Calibration) {
	spec.PEstimate, _ = P(c)
	spec.ValidFraction = c.ValidFraction
	spec.PromptTokensEstimate, spec.CompletionTokensEstimate = c.PromptTokensMean, c.CompletionTokensMean
}

// clip shortens s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
