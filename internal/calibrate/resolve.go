package calibrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
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

// ErrUnreadable: the calibrations could not be read (the bucket or the
// server failed), as opposed to ErrNotFound.
var ErrUnreadable = errors.New("calibrate: calibrations unreadable")

// ForJob finds the calibration a job should take on model: the job's
// task pinned by ref, bound to params for its prompt version unless
// promptVersion names one (Find). A calibration without a valid sample
// gives no p: ErrNotFound too, and either says how to measure one; a store
// that fails is ErrUnreadable; a task that cannot be bound is the task's
// error.
func ForJob(ctx context.Context, kv jetstream.KeyValue, src task.Source, ref task.Ref, params json.RawMessage, model, promptVersion string) (schemas.Calibration, error) {
	if promptVersion == "" {
		inst, err := task.BindRef(ctx, src, ref, params)
		if err != nil {
			return schemas.Calibration{}, err
		}
		promptVersion = PromptVersion(ref, inst)
	}
	c, err := Find(ctx, kv, ref.Name, model, promptVersion)
	switch {
	case err != nil && !errors.Is(err, ErrNotFound):
		return c, fmt.Errorf("%w: %w", ErrUnreadable, err)
	case err == nil && c.Valid == 0:
		err = fmt.Errorf("%w: the calibration of %s on %s counted no valid sample, so it gives no p", ErrNotFound, clip(model, 60), ref.Name)
	}
	if err != nil {
		return c, fmt.Errorf("%w: measure one with maker calibrate --task %s --model %s", err, ref.Name, clip(model, 60))
	}
	return c, nil
}

// clip shortens s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
