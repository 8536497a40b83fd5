package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/makerfleet/makerfleet/internal/retention"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// defaultRetentionInterval is Config.RetentionInterval's default.
const defaultRetentionInterval = 10 * time.Minute

// runRetention sweeps finished work past its retention
// (internal/retention) every Config.RetentionInterval, the first time one
// interval after start, until ctx is done (the coordinator's "retention"
// service). Coordinators share one lease: one sweeps at a time, the
// others skip their turn.
func (c *Coordinator) runRetention(ctx context.Context, topo *topology.Topology) {
	every := c.cfg.RetentionInterval
	if every == 0 {
		every = defaultRetentionInterval
	}
	if every < 0 {
		<-ctx.Done() // off: nothing to run until the coordinator stops
		return
	}
	t := time.NewTimer(every)
	defer t.Stop()
	var sw *retention.Sweeper
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if sw == nil {
			var err error
			if sw, err = retention.New(ctx, topo, retention.Config{Owner: c.cfg.ID, LeaseTTL: max(every, time.Minute), Logger: c.log}); err != nil {
				c.log.Warn("retention sweep: start", "err", err)
				sw = nil
			}
		}
		if sw != nil {
			c.sweepRetention(ctx, sw)
		}
		t.Reset(every)
	}
}

func (c *Coordinator) sweepRetention(ctx context.Context, sw *retention.Sweeper) {
	res, err := sw.Sweep(ctx, time.Now())
	switch {
	case errors.Is(err, retention.ErrBusy):
		c.log.Debug("retention sweep: another coordinator is sweeping")
	case errors.Is(err, retention.ErrLeaseLost):
		c.log.Warn("retention sweep: lease lost, stopped; the next sweep goes on", "err", err, "jobs", res.Jobs)
	case err != nil:
		c.log.Warn("retention sweep", "err", err, "jobs", res.Jobs)
	case len(res.Items) > 0:
		c.log.Info("retention sweep", "jobs", res.Jobs, "journal_messages", res.JournalMessages, "reports", res.Reports,
			"statuses", res.Statuses, "records", res.Records, "leases", res.Leases, "dead_letters", res.DeadLetters,
			"batches", res.Batches, "batch_lines", res.BatchLines)
	}
}
