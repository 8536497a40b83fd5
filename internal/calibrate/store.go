package calibrate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// ErrNotFound: no calibration is stored for the task, model and prompt
// version (or no calibration bucket exists yet).
var ErrNotFound = errors.New("calibrate: no calibration stored")

// OpenBucket returns the calibrations bucket of namespace ns
// (bus.Namespace.CalibrationsBucket). With create it is made when missing
// as the topology declares it (topology.FeatureBucket), with the replicas
// of the fleet's job stream (1 without one): writing needs the admin
// identity (internal/auth), as for the fleet's other policies. Without
// create a missing bucket is ErrNotFound: nothing was ever stored.
func OpenBucket(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, create bool) (jetstream.KeyValue, error) {
	name := ns.CalibrationsBucket()
	replicas := 1
	if create {
		if st, err := js.Stream(ctx, ns.JobsStream()); err == nil {
			replicas = max(st.CachedInfo().Config.Replicas, 1)
		}
	}
	kv, err := topology.FeatureBucket(ctx, js, topology.Config{Namespace: ns, Replicas: replicas}, name, create)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, fmt.Errorf("%w: no bucket %s", ErrNotFound, name)
	case err != nil:
		return nil, fmt.Errorf("calibrate: bucket %s: %w", name, err)
	}
	return kv, nil
}

// Key is the bucket key of a calibration: <task>.<model>.<prompt version>,
// each part a bus.SafeKey (a plain token as it is, any other name as its
// plain characters and a hash of it): dots, slashes, spaces and long
// names give valid keys, and two names never share one.
func Key(task, model, promptVersion string) string {
	return bus.SafeKey(task) + "." + bus.SafeKey(model) + "." + bus.SafeKey(promptVersion)
}

// Put stores c under Key(c.Task, c.Model, c.PromptVersion), replacing the
// one before (the bucket keeps topology.CalibrationHistory of them).
func Put(ctx context.Context, kv jetstream.KeyValue, c schemas.Calibration) error {
	data, err := schemas.Encode(&c)
	if err != nil {
		return err
	}
	key := Key(c.Task, c.Model, c.PromptVersion)
	if _, err := kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("calibrate: store %s: %w", key, err)
	}
	return nil
}

// Lookup returns the stored calibration of model on task with the prompt
// of promptVersion (PromptVersion); ErrNotFound when there is none, or kv
// is nil (no bucket). Adaptive k takes its PLow as the prior of p; plan and
// the job forecasts take P, ValidFraction and the token means.
func Lookup(ctx context.Context, kv jetstream.KeyValue, task, model, promptVersion string) (schemas.Calibration, error) {
	if kv == nil {
		return schemas.Calibration{}, ErrNotFound
	}
	key := Key(task, model, promptVersion)
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return schemas.Calibration{}, fmt.Errorf("%w for %s", ErrNotFound, key)
	}
	if err != nil {
		return schemas.Calibration{}, fmt.Errorf("calibrate: read %s: %w", key, err)
	}
	var c schemas.Calibration
	if err := schemas.Decode(e.Value(), &c); err != nil {
		return schemas.Calibration{}, fmt.Errorf("calibrate: record %s: %w", key, err)
	}
	// A hashed key part could in principle be another name's.
	if c.Task != task || c.Model != model || c.PromptVersion != promptVersion {
		return schemas.Calibration{}, fmt.Errorf("%w for %s (the key holds %s, %s, %s)", ErrNotFound, key, c.Task, c.Model, c.PromptVersion)
	}
	return c, nil
}

// List returns every stored calibration, by key; unreadable records are
// skipped and named in the error returned with the rest.
func List(ctx context.Context, kv jetstream.KeyValue) ([]schemas.Calibration, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("calibrate: list: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var (
		out  []schemas.Calibration
		errs []error
	)
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("calibrate: read %s: %w", k, err))
			continue
		}
		var c schemas.Calibration
		if err := schemas.Decode(e.Value(), &c); err != nil {
			errs = append(errs, fmt.Errorf("calibrate: record %s: %w", k, err))
			continue
		}
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}
