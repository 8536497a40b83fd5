package topology

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// Ensure creates the fleet's streams, shared consumers and buckets (the
// Table's Fleet rows) that are missing, and binds them.
// The topology is created once, by its owners: coordinators (with their
// --replicas) and `maker topology create`, and the embedded fleets of
// `maker run` and the tests; roles that must not shape it (voters) set
// cfg.Await and wait for it instead, and client commands bind it (Open).
// Existing streams and buckets keep their settings, so roles started with
// different settings never fight over them, with one exception that only
// goes up: one with fewer replicas than cfg.Replicas (made by an older
// release, or by a client before the first coordinator) is raised to
// cfg.Replicas. While the server does not answer (a timeout, no
// responders) it retries with backoff for up to cfg.StartupWait, so a role
// started alongside a busy or restarting server waits instead of exiting.
// A server older than bus.MinServerVersion is refused
// (bus.ErrServerVersion).
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) (*Topology, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Await {
		return Await(ctx, js, cfg)
	}
	decls := rows(Table(cfg.Namespace, cfg, JudgeConfig{}), Fleet)
	return bus.RetryTransient(ctx, cfg.StartupWait, func(actx context.Context) (*Topology, error) {
		if err := bus.CheckServer(js); err != nil {
			return nil, err
		}
		topo := &Topology{NS: cfg.Namespace, JS: js, Config: cfg}
		if err := create(actx, js, decls, topo.handles(), cfg.Logger); err != nil {
			return nil, err
		}
		return topo, nil
	})
}

// EnsureJudge creates the judge's streams, consumers and buckets (the
// Table's Judge rows) that are missing, leaving existing ones as they
// are, and binds them. Judges, the clients that send them requests and
// `maker topology create` call it; like Ensure it retries while the
// server does not answer, for up to cfg.StartupWait.
func EnsureJudge(ctx context.Context, js jetstream.JetStream, cfg JudgeConfig) (*JudgeTopology, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	decls := rows(Table(cfg.Namespace, Config{}, cfg), Judge)
	return bus.RetryTransient(ctx, cfg.StartupWait, func(actx context.Context) (*JudgeTopology, error) {
		if err := bus.CheckServer(js); err != nil {
			return nil, err
		}
		topo := &JudgeTopology{NS: cfg.Namespace, JS: js, Config: cfg}
		if err := create(actx, js, decls, topo.handles(), slog.Default()); err != nil {
			return nil, err
		}
		return topo, nil
	})
}

// create makes every declaration of decls that is missing, in order, and
// puts the buckets named in handles there.
func create(ctx context.Context, js jetstream.JetStream, decls []Decl, handles map[string]*jetstream.KeyValue, log *slog.Logger) error {
	for _, d := range decls {
		switch d.Kind {
		case Stream:
			if err := ensureStream(ctx, js, d.Stream, log); err != nil {
				return err
			}
		case Consumer:
			if err := ensureConsumer(ctx, js, d.Of, d.Consumer); err != nil {
				return err
			}
		case Bucket:
			kv, err := ensureKV(ctx, js, log, d.Bucket)
			if err != nil {
				return err
			}
			if dst := handles[d.Bucket.Bucket]; dst != nil {
				*dst = bus.Resilient(kv)
			}
		case Objects:
			if err := ensureObjects(ctx, js, d.Objects); err != nil {
				return err
			}
		}
	}
	return nil
}

// ensureObjects creates the object store oc names when it is missing.
func ensureObjects(ctx context.Context, js jetstream.JetStream, oc jetstream.ObjectStoreConfig) error {
	if _, err := js.ObjectStore(ctx, oc.Bucket); err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	_, err := js.CreateObjectStore(ctx, oc)
	if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil // another process created it first
	}
	if err != nil {
		return fmt.Errorf("topology: object store %s: %w", oc.Bucket, err)
	}
	return nil
}

// FeatureBucket returns the bucket of namespace cfg.Namespace that the
// Table declares as a Feature's under name, creating it as declared when
// it is missing and create is set. Without create a missing bucket is an
// error wrapping jetstream.ErrBucketNotFound. A feature that has never
// written has no bucket: readers do not create one.
func FeatureBucket(ctx context.Context, js jetstream.JetStream, cfg Config, name string, create bool) (jetstream.KeyValue, error) {
	i := slices.IndexFunc(Table(cfg.Namespace, cfg, JudgeConfig{}), func(d Decl) bool {
		return d.Creator == Feature && d.Kind == Bucket && d.Bucket.Bucket == name
	})
	if i < 0 {
		return nil, fmt.Errorf("topology: no feature bucket %s in the table", name)
	}
	kv, err := js.KeyValue(ctx, name)
	if err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) || !create {
		return kv, err
	}
	kv, err = js.CreateKeyValue(ctx, Table(cfg.Namespace, cfg, JudgeConfig{})[i].Bucket)
	if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.KeyValue(ctx, name) // another process created it first
	}
	return kv, err
}

func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, log *slog.Logger) error {
	s, err := js.Stream(ctx, sc.Name)
	if err == nil {
		// An existing stream (made by an operator, or by an older release)
		// must still take every subject this release publishes.
		have := s.CachedInfo().Config.Subjects
		for _, want := range sc.Subjects {
			if !slices.ContainsFunc(have, func(h string) bool { return bus.Covers(h, want) }) {
				return fmt.Errorf("%w: stream %s takes subjects %v, which do not cover %s; add it (nats stream edit) or remove the stream",
					ErrTopology, sc.Name, have, want)
			}
		}
		if s, err = raiseReplicas(ctx, js, s, sc.Replicas, log); err != nil {
			return err
		}
		return setLimits(ctx, js, s, sc, log)
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("topology: stream %s: %w", sc.Name, err)
	}
	_, err = js.CreateStream(ctx, sc)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		_, err = js.Stream(ctx, sc.Name) // another role created it first
		return err
	}
	if err != nil {
		return fmt.Errorf("topology: create stream %s: %w", sc.Name, err)
	}
	return nil
}

func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, cc jetstream.ConsumerConfig) error {
	_, err := js.Consumer(ctx, stream, cc.Durable)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("topology: consumer %s: %w", cc.Durable, err)
	}
	if _, err := js.CreateConsumer(ctx, stream, cc); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("topology: create consumer %s: %w", cc.Durable, err)
	}
	return nil
}

func ensureKV(ctx context.Context, js jetstream.JetStream, log *slog.Logger, kc jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, kc.Bucket)
	if err == nil {
		// A bucket is the stream KV_<bucket>.
		if s, err := js.Stream(ctx, "KV_"+kc.Bucket); err == nil {
			if _, err := raiseReplicas(ctx, js, s, max(kc.Replicas, 1), log); err != nil {
				return nil, err
			}
		}
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("topology: bucket %s: %w", kc.Bucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, kc)
	if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.KeyValue(ctx, kc.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("topology: create bucket %s: %w", kc.Bucket, err)
	}
	return kv, nil
}

// raiseReplicas raises stream s to want replicas when it has fewer: the
// topology's replicas are the most any of its creators asked for, never
// those of whichever role happened to start first. Never lowered, so
// creators started with different settings do not fight.
func raiseReplicas(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, want int, log *slog.Logger) (jetstream.Stream, error) {
	sc := s.CachedInfo().Config
	if sc.Replicas >= want {
		return s, nil
	}
	have := max(sc.Replicas, 1)
	sc.Replicas = want
	up, err := js.UpdateStream(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s has %d replicas; raising it to %d: %w", ErrTopology, sc.Name, have, want, err)
	}
	log.Info("stream replicas raised", "stream", sc.Name, "from", have, "to", want)
	return up, nil
}

// setLimits gives an existing stream the size and per-subject limits of
// want that it has none of (one an older release made); a limit it has,
// an operator's, stays. An identity that may not update streams (the
// judge) leaves them as they are, with a warning: the stream works
// without, as it did.
func setLimits(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, want jetstream.StreamConfig, log *slog.Logger) error {
	sc := s.CachedInfo().Config
	changed := false
	if sc.MaxBytes <= 0 && want.MaxBytes > 0 {
		sc.MaxBytes, changed = want.MaxBytes, true
	}
	if sc.MaxMsgsPerSubject <= 0 && want.MaxMsgsPerSubject > 0 {
		sc.MaxMsgsPerSubject, sc.DiscardNewPerSubject, changed = want.MaxMsgsPerSubject, want.DiscardNewPerSubject, true
	}
	if !changed {
		return nil
	}
	sc.Discard = want.Discard
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("stream limits not set: run maker topology create as the admin to set them", "stream", sc.Name,
			"max_bytes", sc.MaxBytes, "max_msgs_per_subject", sc.MaxMsgsPerSubject, "err", err)
		return nil
	}
	log.Info("stream limits set", "stream", sc.Name, "max_bytes", sc.MaxBytes, "max_msgs_per_subject", sc.MaxMsgsPerSubject)
	return nil
}

// Teardown deletes the namespace's streams and buckets, everything Ensure
// and the features created (the Table's Fleet and Feature rows): for
// throwaway namespaces (a private in-process fleet on a shared server).
// Missing ones are skipped.
func Teardown(ctx context.Context, js jetstream.JetStream, ns bus.Namespace) error {
	t := Table(ns, Config{}, JudgeConfig{})
	return teardown(ctx, js, append(rows(t, Fleet), rows(t, Feature)...))
}

// TeardownJudge deletes everything EnsureJudge created in ns (the Table's
// Judge rows). Missing ones are skipped.
func TeardownJudge(ctx context.Context, js jetstream.JetStream, ns bus.Namespace) error {
	return teardown(ctx, js, rows(Table(ns, Config{}, JudgeConfig{}), Judge))
}

// teardown deletes the streams and buckets of decls (their consumers go
// with their streams).
func teardown(ctx context.Context, js jetstream.JetStream, decls []Decl) error {
	var errs []error
	for _, d := range decls {
		switch d.Kind {
		case Stream:
			if err := js.DeleteStream(ctx, d.Name()); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				errs = append(errs, err)
			}
		case Bucket:
			if err := js.DeleteKeyValue(ctx, d.Name()); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
				errs = append(errs, err)
			}
		case Objects:
			if err := js.DeleteObjectStore(ctx, d.Name()); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
