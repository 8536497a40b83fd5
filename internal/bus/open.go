package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Missing topology: the server has none (or not all) of a namespace's
// streams and buckets. Open and OpenJudge return them, wrapped with the
// namespace and what is missing.
var (
	ErrNoFleet = errors.New("no makerfleet topology on this server")
	ErrNoJudge = errors.New("no break-glass (judge) topology on this server")
)

// Open binds the namespace's existing streams and buckets, creating
// nothing: for clients that only read or change what a fleet already holds
// (status, listings, controls), which must not leave a fleet's topology on
// a server that has none. When any is missing it returns ErrNoFleet. Like
// Ensure it retries while the server does not answer, for up to
// cfg.StartupWait; the rest of cfg is not checked against the server.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Topology, error) {
	cfg.defaults()
	if err := cfg.Namespace.Validate(); err != nil {
		return nil, err
	}
	ns := cfg.Namespace
	return retryTransient(ctx, cfg.StartupWait, func(actx context.Context) (*Topology, error) {
		if err := checkServer(js); err != nil {
			return nil, err
		}
		topo := &Topology{NS: ns, JS: js, Config: cfg}
		err := bind(actx, js,
			[]string{ns.JobsStream(), ns.SamplesStream(), ns.ResultsStream(), ns.JournalStream(), ns.DLQStream(), ns.BatchesStream()},
			map[string]*jetstream.KeyValue{
				ns.StatusBucket(): &topo.Status, ns.ReportsBucket(): &topo.Reports,
				ns.JobsBucket(): &topo.Jobs, ns.LeasesBucket(): &topo.Leases, ns.TasksBucket(): &topo.Tasks,
				ns.QuotasBucket(): &topo.Quotas, ns.APIKeysBucket(): &topo.APIKeys, ns.BatchesBucket(): &topo.Batches,
				ns.PricesBucket(): &topo.Prices,
			},
			ErrNoFleet, ns, "start a coordinator, or run maker topology create")
		if err != nil {
			return nil, err
		}
		return topo, nil
	})
}

// OpenJudge binds the judge's existing streams and buckets, creating
// nothing, as Open does for the fleet's; ErrNoJudge when any is missing.
func OpenJudge(ctx context.Context, js jetstream.JetStream, cfg JudgeConfig) (*JudgeTopology, error) {
	cfg.defaults()
	if err := cfg.Namespace.Validate(); err != nil {
		return nil, err
	}
	ns := cfg.Namespace
	return retryTransient(ctx, cfg.StartupWait, func(actx context.Context) (*JudgeTopology, error) {
		if err := checkServer(js); err != nil {
			return nil, err
		}
		topo := &JudgeTopology{NS: ns, JS: js, Config: cfg}
		err := bind(actx, js,
			[]string{ns.JudgeStream(), ns.JudgeAuditStream()},
			map[string]*jetstream.KeyValue{
				ns.JudgeAnswersBucket(): &topo.Answers, ns.JudgeSessionsBucket(): &topo.Sessions,
				ns.JudgeApprovalsBucket(): &topo.Approvals,
			},
			ErrNoJudge, ns, "start a judge (maker judge), or ask one (maker breakglass)")
		if err != nil {
			return nil, err
		}
		return topo, nil
	})
}

// bind checks that every stream exists and binds every bucket into its
// destination. What is missing is reported at once, wrapped in errMissing
// with hint; any other failure is returned as it is (Transient ones are
// retried by the caller).
func bind(ctx context.Context, js jetstream.JetStream, streams []string, buckets map[string]*jetstream.KeyValue,
	errMissing error, ns Namespace, hint string,
) error {
	var missing []string
	for _, name := range streams {
		_, err := js.Stream(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			missing = append(missing, "stream "+name)
		case err != nil:
			return fmt.Errorf("bus: stream %s: %w", name, err)
		}
	}
	for name, dst := range buckets {
		kv, err := js.KeyValue(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			missing = append(missing, "bucket "+name)
		case err != nil:
			return fmt.Errorf("bus: bucket %s: %w", name, err)
		default:
			*dst = resilient(kv)
		}
	}
	slices.Sort(missing)
	switch {
	case len(missing) == 0:
		return nil
	case len(missing) == len(streams)+len(buckets):
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
// not shape the topology by starting first (voters) use it through
// Ensure with cfg.Await.
func Await(ctx context.Context, js jetstream.JetStream, cfg Config) (*Topology, error) {
	cfg.defaults()
	backoff := 250 * time.Millisecond
	var logged time.Time
	for {
		topo, err := Open(ctx, js, cfg)
		if err == nil {
			err = sharedConsumers(ctx, js, cfg.Namespace)
		}
		if err == nil {
			if !logged.IsZero() {
				cfg.Logger.Info("fleet topology found", "namespace", cfg.Namespace.String())
			}
			return topo, nil
		}
		if !errors.Is(err, ErrNoFleet) && !Transient(err) {
			return nil, err
		}
		if logged.IsZero() || time.Since(logged) >= time.Minute {
			cfg.Logger.Info("waiting for the fleet topology: start a coordinator, or run maker topology create",
				"namespace", cfg.Namespace.String(), "missing", err.Error())
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: waiting for the fleet topology: %w (%w)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// sharedConsumers checks that the shared durables exist (the voters' and
// the coordinators'), ErrNoFleet when one is missing.
func sharedConsumers(ctx context.Context, js jetstream.JetStream, ns Namespace) error {
	for _, c := range []struct{ stream, name string }{
		{ns.SamplesStream(), ConsumerVoters}, {ns.JobsStream(), ConsumerCoordinators},
	} {
		_, err := js.Consumer(ctx, c.stream, c.name)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
			return fmt.Errorf("%w (namespace %s): consumer %s of stream %s missing", ErrNoFleet, ns, c.name, c.stream)
		case err != nil:
			return fmt.Errorf("bus: consumer %s: %w", c.name, err)
		}
	}
	return nil
}
