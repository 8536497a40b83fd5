package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// Who creates what a reader finds missing, in the words of ErrNoFleet's
// and ErrNoJudge's messages.
const (
	fleetHint = "start a coordinator, or run maker topology create"
	judgeHint = "start a judge (maker judge), or ask one (maker breakglass)"
)

// Open binds the namespace's existing streams and buckets (the Table's
// required Fleet rows), creating nothing: for clients that only read or
// change what a fleet already holds (status, listings, controls, the API
// server), which must not leave a fleet's topology on a server that has
// none. When any is missing it returns ErrNoFleet, saying what is missing
// and who creates it. Like Ensure it retries while the server does not
// answer, for up to cfg.StartupWait; the rest of cfg is not checked
// against the server.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Topology, error) {
	cfg.defaults()
	if err := cfg.Namespace.Validate(); err != nil {
		return nil, err
	}
	decls := required(rows(Table(cfg.Namespace, cfg, JudgeConfig{}), Fleet), Stream, Bucket)
	return bus.RetryTransient(ctx, cfg.StartupWait, func(actx context.Context) (*Topology, error) {
		if err := bus.CheckServer(js); err != nil {
			return nil, err
		}
		topo := &Topology{NS: cfg.Namespace, JS: js, Config: cfg}
		if err := bind(actx, js, decls, topo.handles(), ErrNoFleet, cfg.Namespace, fleetHint); err != nil {
			return nil, err
		}
		return topo, nil
	})
}

// OpenJudge binds the judge's existing streams and buckets (the Table's
// required Judge rows), creating nothing, as Open does for the fleet's;
// ErrNoJudge when any is missing.
func OpenJudge(ctx context.Context, js jetstream.JetStream, cfg JudgeConfig) (*JudgeTopology, error) {
	cfg.defaults()
	if err := cfg.Namespace.Validate(); err != nil {
		return nil, err
	}
	decls := required(rows(Table(cfg.Namespace, Config{}, cfg), Judge), Stream, Bucket)
	return bus.RetryTransient(ctx, cfg.StartupWait, func(actx context.Context) (*JudgeTopology, error) {
		if err := bus.CheckServer(js); err != nil {
			return nil, err
		}
		topo := &JudgeTopology{NS: cfg.Namespace, JS: js, Config: cfg}
		if err := bind(actx, js, decls, topo.handles(), ErrNoJudge, cfg.Namespace, judgeHint); err != nil {
			return nil, err
		}
		return topo, nil
	})
}

// required returns the required declarations of decls of the kinds given.
func required(decls []Decl, kinds ...Kind) []Decl {
	var out []Decl
	for _, d := range decls {
		if d.Required && slices.Contains(kinds, d.Kind) {
			out = append(out, d)
		}
	}
	return out
}

// bind checks that every stream of decls exists and binds every bucket
// into its handle. What is missing is reported at once, wrapped in
// errMissing with hint; any other failure is returned as it is
// (bus.Transient ones are retried by the caller).
func bind(ctx context.Context, js jetstream.JetStream, decls []Decl, handles map[string]*jetstream.KeyValue,
	errMissing error, ns bus.Namespace, hint string,
) error {
	var missing []string
	for _, d := range decls {
		name := d.Name()
		switch d.Kind {
		case Stream:
			_, err := js.Stream(ctx, name)
			switch {
			case errors.Is(err, jetstream.ErrStreamNotFound):
				missing = append(missing, "stream "+name)
			case err != nil:
				return fmt.Errorf("topology: stream %s: %w", name, err)
			}
		case Bucket:
			kv, err := js.KeyValue(ctx, name)
			switch {
			case errors.Is(err, jetstream.ErrBucketNotFound):
				missing = append(missing, "bucket "+name)
			case err != nil:
				return fmt.Errorf("topology: bucket %s: %w", name, err)
			default:
				if dst := handles[name]; dst != nil {
					*dst = bus.Resilient(kv)
				}
			}
		}
	}
	slices.Sort(missing)
	switch {
	case len(missing) == 0:
		return nil
	case len(missing) == len(decls):
		return fmt.Errorf("%w (namespace %s): %s", errMissing, ns, hint)
	default:
		// Part of it: made by hand, or by an older release.
		return fmt.Errorf("%w (namespace %s): %s missing; %s", errMissing, ns, strings.Join(missing, ", "), hint)
	}
}

// Await binds the namespace's topology as Open does, but waits for it
// while it is missing (or any part, a shared consumer included): it logs
// "waiting for the fleet topology" (at once, then every minute) and
// tries again, backing off from 250ms to 5s, until a coordinator or
// `maker topology create` has made it. ctx ends the wait. Roles that must
// not shape the topology by starting first (voters, maker serve) use it
// through Ensure with cfg.Await.
func Await(ctx context.Context, js jetstream.JetStream, cfg Config) (*Topology, error) {
	cfg.defaults()
	backoff := 250 * time.Millisecond
	var logged time.Time
	for {
		topo, err := Open(ctx, js, cfg)
		if err == nil {
			err = sharedConsumers(ctx, js, cfg)
		}
		if err == nil {
			if !logged.IsZero() {
				cfg.Logger.Info("fleet topology found", "namespace", cfg.Namespace.String())
			}
			return topo, nil
		}
		if !errors.Is(err, ErrNoFleet) && !bus.Transient(err) {
			return nil, err
		}
		if logged.IsZero() || time.Since(logged) >= time.Minute {
			cfg.Logger.Info("waiting for the fleet topology: "+fleetHint,
				"namespace", cfg.Namespace.String(), "missing", err.Error())
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("topology: waiting for the fleet topology: %w (%w)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// sharedConsumers checks that the fleet's required consumers exist (the
// voters' and the coordinators'), ErrNoFleet when one is missing.
func sharedConsumers(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	for _, d := range required(rows(Table(cfg.Namespace, cfg, JudgeConfig{}), Fleet), Consumer) {
		_, err := js.Consumer(ctx, d.Of, d.Name())
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
			return fmt.Errorf("%w (namespace %s): consumer %s of stream %s missing", ErrNoFleet, cfg.Namespace, d.Name(), d.Of)
		case err != nil:
			return fmt.Errorf("topology: consumer %s: %w", d.Name(), err)
		}
	}
	return nil
}
