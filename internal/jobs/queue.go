package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// NoCoordinator is QueuedReason's answer when no coordinator holds a live
// lease.
const NoCoordinator = "no coordinator has taken it yet"

// QueuedReason says, for a person, why the queued job tenant/job has not
// started, from the leases coordinators hold: held off after a failed
// attempt (until its lease expires), waiting for a coordinator with a free
// slot (some hold live leases on other jobs, all of them busy or about to
// take it), or taken by no coordinator at all (none holds a live lease:
// none is running, as far as the bucket can tell).
func QueuedReason(ctx context.Context, topo *topology.Topology, tenant, job string) (string, error) {
	now := time.Now()
	lister, err := topo.Leases.ListKeys(ctx)
	if err != nil {
		return "", fmt.Errorf("list leases: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	own := bus.JobKey(tenant, job)
	owners := map[string]int{}
	jobs := 0
	for key := range lister.Keys() {
		e, err := topo.Leases.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released and deleted meanwhile
		}
		if err != nil {
			return "", fmt.Errorf("read lease %s: %w", key, err)
		}
		var l schemas.Lease
		if schemas.Decode(e.Value(), &l) != nil || !l.ExpiresAt.After(now) {
			continue // unreadable, expired or released: nobody's
		}
		switch {
		case key == own && l.HoldOff:
			return fmt.Sprintf("held off after a failed attempt until %s", l.ExpiresAt.Local().Format(time.TimeOnly)), nil
		case key == own:
			return fmt.Sprintf("%s is taking it", l.Owner), nil
		case !l.HoldOff:
			owners[l.Owner]++
			jobs++
		}
	}
	if jobs == 0 {
		return NoCoordinator, nil
	}
	verb := "are"
	if len(owners) == 1 {
		verb = "is"
	}
	return fmt.Sprintf("waiting for a free coordinator slot (%s %s running %s)",
		count(len(owners), "coordinator"), verb, count(jobs, "job")), nil
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
