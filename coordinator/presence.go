package coordinator

import (
	"cmp"
	"context"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/internal/presence"
	"github.com/makerfleet/makerfleet/schemas"
)

// startPresence starts the coordinator's presence publisher
// (internal/presence); stop ends it and deletes the record.
func (c *Coordinator) startPresence(context.Context) (stop func(), err error) {
	if c.cfg.NoPresence {
		return func() {}, nil
	}
	pcfg := c.cfg.Presence
	pcfg.Namespace = c.cfg.Bus.Namespace
	if pcfg.Logger == nil {
		pcfg.Logger = c.log
	}
	pub, err := presence.NewPublisher(c.js, presence.RoleCoordinator, c.cfg.ID, func(now time.Time) schemas.Message { return c.Presence(now) }, pcfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pub.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}, nil
}

// notePresence records where a running job stands, for the presence
// record (called with each status the job publishes).
func (c *Coordinator) notePresence(key string, j schemas.PresenceJob) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[key] {
		c.present[key] = j
	}
}

// Presence is the coordinator's presence record at now: the jobs it runs
// (at most schemas.MaxPresenceJobs, by tenant and id) and their samples in
// flight by tenant.
func (c *Coordinator) Presence(now time.Time) *schemas.CoordinatorPresence {
	c.mu.Lock()
	jobs := make([]schemas.PresenceJob, 0, len(c.running))
	for key := range c.running {
		if j, ok := c.present[key]; ok {
			jobs = append(jobs, j)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(jobs, func(a, b schemas.PresenceJob) int {
		return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.ID, b.ID))
	})
	byTenant := map[string]*schemas.TenantInFlight{}
	var tenants []schemas.TenantInFlight
	for _, j := range jobs {
		t := byTenant[j.Tenant]
		if t == nil {
			tenants = append(tenants, schemas.TenantInFlight{Tenant: j.Tenant})
			t = &tenants[len(tenants)-1]
			byTenant[j.Tenant] = t
		}
		t.Jobs++
		t.InFlight += j.InFlight
	}
	p := &schemas.CoordinatorPresence{
		Header: schemas.NewHeader(schemas.KindCoordinatorPresence),
		ID:     c.cfg.ID, Build: presence.Clip(c.cfg.Build, 128), Jobs: jobs, Tenants: tenants, Started: c.started, At: now,
	}
	if host, err := os.Hostname(); err == nil {
		p.Host = presence.Clip(host, 128)
	}
	if len(p.Jobs) > schemas.MaxPresenceJobs {
		p.JobsMore = len(p.Jobs) - schemas.MaxPresenceJobs
		p.Jobs = p.Jobs[:schemas.MaxPresenceJobs]
	}
	if len(p.Tenants) > schemas.MaxPresenceTenants {
		p.Tenants = p.Tenants[:schemas.MaxPresenceTenants]
	}
	if p.Tenants == nil {
		p.Tenants = []schemas.TenantInFlight{}
	}
	if p.At.Before(p.Started) {
		p.At = p.Started
	}
	return p
}
