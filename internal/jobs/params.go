package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Inputs keeps params by reference: *inputs.Store.
type Inputs interface {
	Get(ctx context.Context, ref string) ([]byte, error)
	Put(ctx context.Context, data []byte) (string, error)
}

// Params returns the job's params: inline, or read from in by reference.
func Params(ctx context.Context, in Inputs, spec schemas.JobSpec) (json.RawMessage, error) {
	if spec.ParamsRef == "" {
		return spec.Params, nil
	}
	if in == nil {
		return nil, fmt.Errorf("params %s are kept by reference, and this program has no inputs store", spec.ParamsRef)
	}
	b, err := in.Get(ctx, spec.ParamsRef)
	if err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	return b, nil
}

// Bind binds the job's task to its params (read from in when kept by
// reference).
func Bind(ctx context.Context, tasks task.Source, in Inputs, spec schemas.JobSpec) (task.Instance, error) {
	params, err := Params(ctx, in, spec)
	if err != nil {
		return nil, err
	}
	return task.BindRef(ctx, tasks, TaskRef(spec), params)
}

// checkParamsSize refuses params over schemas.MaxParamsBytes, naming both.
func checkParamsSize(params []byte) error {
	if len(params) > schemas.MaxParamsBytes {
		return fmt.Errorf("%w: params are %s, over the limit of %s", ErrTooBig, Bytes(int64(len(params))), Bytes(schemas.MaxParamsBytes))
	}
	return nil
}

// Externalize moves params larger than schemas.InlineParamsMax into in
// and names them by reference (spec.ParamsRef), so that no message of the
// job carries them. Params already by reference, or small, stay as they
// are.
func Externalize(ctx context.Context, in Inputs, spec *schemas.JobSpec) error {
	if spec.ParamsRef != "" || len(spec.Params) <= schemas.InlineParamsMax {
		return nil
	}
	if err := checkParamsSize(spec.Params); err != nil {
		return err
	}
	if in == nil {
		return fmt.Errorf("params of %s need the fleet's inputs store, and this program has none", Bytes(int64(len(spec.Params))))
	}
	ref, err := in.Put(ctx, spec.Params)
	if err != nil {
		return fmt.Errorf("store the job's params (%s): %w", Bytes(int64(len(spec.Params))), err)
	}
	spec.Params, spec.ParamsRef = nil, ref
	return nil
}

// Bytes writes n bytes for people: "1.4 MB" style, in binary units.
func Bytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// SplitTask reads a task named as NAME@VERSION (as --task takes it) into
// its name and version, so that an API request or a batch line may name
// a version the same way; a version given both ways must agree.
func SplitTask(task, version string) (string, string, error) {
	name, v, ok := strings.Cut(task, "@")
	switch {
	case !ok:
		return task, version, nil
	case version != "" && version != v:
		return "", "", fmt.Errorf("%w: task %q names version %s, and task_version says %s", ErrInvalid, task, v, version)
	}
	return name, v, nil
}
