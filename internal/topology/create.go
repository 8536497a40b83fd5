package topology

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
// different settings never fight over them, with exceptions that fix what
// an older release made: one with fewer replicas than cfg.Replicas (made
// by an older release, or by a client before the first coordinator) is
// raised to cfg.Replicas; limits a stream has none of are set
// (setLimits); a duplicate window an older release gave a stream is given
// cfg's (sizeWindow; with cfg.SetDuplicates, any window). While the server
// does not answer (a timeout, no responders) it retries with backoff for
// up to cfg.StartupWait, so a role started alongside a busy or restarting
// server waits instead of exiting.
// A server older than bus.MinServerVersion is refused
// (bus.ErrServerVersion).
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) (*Topology, error) {
	given := cfg // the windows given, before the defaults
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Await {
		return Await(ctx, js, cfg)
	}
	decls := rows(Table(cfg.Namespace, cfg, JudgeConfig{}), Fleet)
	set := setWindows(cfg, given)
	return bus.RetryTransient(ctx, cfg.StartupWait, func(actx context.Context) (*Topology, error) {
		if err := bus.CheckServer(js); err != nil {
			return nil, err
		}
		topo := &Topology{NS: cfg.Namespace, JS: js, Config: cfg}
		if err := create(actx, js, decls, set, topo.handles(), cfg.Logger); err != nil {
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
		if err := create(actx, js, decls, nil, topo.handles(), slog.Default()); err != nil {
			return nil, err
		}
		return topo, nil
	})
}

// setWindows names the streams whose windows given (cfg before its
// defaults) Ensure sets whatever they hold: none without SetDuplicates.
func setWindows(cfg, given Config) map[string]bool {
	if !given.SetDuplicates {
		return nil
	}
	ns := cfg.Namespace
	return map[string]bool{
		ns.SamplesStream(): given.WorkDuplicates != 0,
		ns.ResultsStream(): given.WorkDuplicates != 0,
		ns.JournalStream(): given.JournalDuplicates != 0,
	}
}

// create makes every declaration of decls that is missing, in order, and
// puts the buckets named in handles there. An existing stream named in
// setWindow takes its declared window.
func create(ctx context.Context, js jetstream.JetStream, decls []Decl, setWindow map[string]bool, handles map[string]*jetstream.KeyValue, log *slog.Logger) error {
	for _, d := range decls {
		switch d.Kind {
		case Stream:
			if err := ensureStream(ctx, js, d, setWindow[d.Name()], log); err != nil {
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

// ensureStream creates d's stream when it is missing. An existing one must
// take d's subjects; its replicas, limits and duplicate window are brought
// to d's where an older release left them (raiseReplicas, setLimits,
// sizeWindow), each update made on the config the last one returned.
func ensureStream(ctx context.Context, js jetstream.JetStream, d Decl, setWindow bool, log *slog.Logger) error {
	sc := d.Stream
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
		if s, err = setLimits(ctx, js, s, sc, log); err != nil {
			return err
		}
		return sizeWindow(ctx, js, s, d, setWindow, log)
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
// without, as it did. It returns the stream as it now is.
func setLimits(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, want jetstream.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	sc := s.CachedInfo().Config
	changed := false
	if sc.MaxBytes <= 0 && want.MaxBytes > 0 {
		sc.MaxBytes, changed = want.MaxBytes, true
	}
	if sc.MaxMsgsPerSubject <= 0 && want.MaxMsgsPerSubject > 0 {
		sc.MaxMsgsPerSubject, sc.DiscardNewPerSubject, changed = want.MaxMsgsPerSubject, want.DiscardNewPerSubject, true
	}
	if !changed {
		return s, nil
	}
	sc.Discard = want.Discard
	up, err := js.UpdateStream(ctx, sc)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		log.Warn("stream limits not set: run maker topology create as the admin to set them", "stream", sc.Name,
			"max_bytes", sc.MaxBytes, "max_msgs_per_subject", sc.MaxMsgsPerSubject, "err", err)
		return s, nil
	}
	log.Info("stream limits set", "stream", sc.Name, "max_bytes", sc.MaxBytes, "max_msgs_per_subject", sc.MaxMsgsPerSubject)
	return up, nil
}

// sizeWindow gives existing stream s the duplicate window d declares,
// when d's window is the config's (d.OldDuplicates) and either set is
// true (maker topology create given the window) or s is an older
// release's: no DuplicatesMark, and the window releases gave it before
// the windows were sized. The stream is marked, so that a window set then
// stays. Any other window is an operator's (or another role's) and stays,
// noted in the log when it is not d's. Like setLimits, an identity that
// may not update streams leaves it, with a warning.
func sizeWindow(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, d Decl, set bool, log *slog.Logger) error {
	if d.OldDuplicates == 0 {
		return nil // a fixed window
	}
	sc := s.CachedInfo().Config
	want := d.Stream.Duplicates
	_, marked := sc.Metadata[DuplicatesMark]
	switch {
	case marked && sc.Duplicates == want:
		return nil
	case set, !marked && sc.Duplicates == d.OldDuplicates:
	default:
		if sc.Duplicates != want {
			log.Info("stream keeps its duplicate window; maker topology create --work-duplicates or --journal-duplicates sets it",
				"stream", sc.Name, "window", sc.Duplicates, "configured", want)
		}
		return nil
	}
	from := sc.Duplicates
	sc.Duplicates = want
	sc.Metadata = maps.Clone(sc.Metadata)
	if sc.Metadata == nil {
		sc.Metadata = map[string]string{}
	}
	maps.Copy(sc.Metadata, d.Stream.Metadata)
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("stream duplicate window not set: run maker topology create as the admin to set it", "stream", sc.Name,
			"window", from, "configured", want, "err", err)
		return nil
	}
	log.Info("stream duplicate window set", "stream", sc.Name, "from", from, "to", want)
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
