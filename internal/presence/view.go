package presence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// View is the fleet view of namespace ns at now: the live presence
// records (Read), the work queues from JetStream's stream and consumer
// info, and their totals. A fleet without a presence bucket (made by an
// older release) has a view without voters and coordinators.
func View(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, now time.Time) (schemas.FleetView, error) {
	recs, err := Read(ctx, js, ns, now)
	if err != nil && !errors.Is(err, ErrNoBucket) {
		return schemas.FleetView{}, err
	}
	queues, err := Queues(ctx, js, ns)
	if err != nil {
		return schemas.FleetView{}, err
	}
	return Build(now, recs, queues), nil
}

// Queues are the fleet's work queues: jobs (consumer coordinators),
// samples (consumer voters) and results (each job's own consumer).
func Queues(ctx context.Context, js jetstream.JetStream, ns bus.Namespace) ([]schemas.QueueView, error) {
	specs := []struct{ name, stream, consumer string }{
		{"jobs", ns.JobsStream(), bus.ConsumerCoordinators},
		{"samples", ns.SamplesStream(), bus.ConsumerVoters},
		{"results", ns.ResultsStream(), ""},
	}
	out := make([]schemas.QueueView, 0, len(specs))
	for _, q := range specs {
		s, err := js.Stream(ctx, q.stream)
		if err != nil {
			return nil, fmt.Errorf("presence: stream %s: %w", q.stream, err)
		}
		st := s.CachedInfo().State
		v := schemas.QueueView{Name: q.name, Stream: q.stream, Consumer: q.consumer, Messages: st.Msgs, Consumers: st.Consumers}
		if q.consumer == "" {
			v.NumPending = st.Msgs
		} else {
			c, err := js.Consumer(ctx, q.stream, q.consumer)
			if err != nil {
				return nil, fmt.Errorf("presence: consumer %s/%s: %w", q.stream, q.consumer, err)
			}
			ci := c.CachedInfo()
			v.NumPending, v.AckPending, v.Redelivered, v.Waiting = ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting
		}
		out = append(out, v)
	}
	return out, nil
}

// Build makes the fleet view of recs and queues at now: the records as
// they are, their totals, and the coordinators' tenants summed by tenant.
func Build(now time.Time, recs Records, queues []schemas.QueueView) schemas.FleetView {
	v := schemas.FleetView{
		At: now.UTC(), Voters: recs.Voters, Coordinators: recs.Coordinators, Queues: queues, Skipped: recs.Skipped,
		Tenants: []schemas.TenantInFlight{},
	}
	if v.Voters == nil {
		v.Voters = []schemas.VoterPresence{}
	}
	if v.Coordinators == nil {
		v.Coordinators = []schemas.CoordinatorPresence{}
	}
	if v.Queues == nil {
		v.Queues = []schemas.QueueView{}
	}
	t := &v.Totals
	t.Voters, t.Coordinators = len(v.Voters), len(v.Coordinators)
	for _, p := range v.Voters {
		t.Concurrency += p.Concurrency
		t.InFlight += p.InFlight
		t.SamplesPerS += p.SamplesPerS
		// Claims: summed without overflowing.
		for _, f := range []struct {
			sum *int64
			v   int64
		}{{&t.SamplesAnswered, p.SamplesAnswered}, {&t.RedFlags, p.RedFlags},
			{&t.ProviderErrors, p.ProviderErrors}, {&t.RateLimited, p.RateLimited}, {&t.Refused, p.Refused}} {
			*f.sum = satAdd(*f.sum, f.v)
		}
	}
	byTenant := map[string]*schemas.TenantInFlight{}
	for _, c := range v.Coordinators {
		t.Jobs += len(c.Jobs) + c.JobsMore
		for _, ti := range c.Tenants {
			sum := byTenant[ti.Tenant]
			if sum == nil {
				sum = &schemas.TenantInFlight{Tenant: ti.Tenant}
				byTenant[ti.Tenant] = sum
			}
			sum.Jobs += ti.Jobs
			sum.InFlight += ti.InFlight
		}
	}
	for _, s := range byTenant {
		v.Tenants = append(v.Tenants, *s)
	}
	slices.SortFunc(v.Tenants, func(a, b schemas.TenantInFlight) int { return strings.Compare(a.Tenant, b.Tenant) })
	return v
}

// satAdd is a+b for counts >= 0, at most math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
