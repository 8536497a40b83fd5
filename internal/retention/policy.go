package retention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// Ages are how long each kind of a finished job's (or batch's) data is
// kept after it ended. 0 keeps that kind forever.
type Ages struct {
	Journal  time.Duration `json:"journal"`
	Reports  time.Duration `json:"reports"`
	Registry time.Duration `json:"registry"`
	Status   time.Duration `json:"status"`
	DLQ      time.Duration `json:"dlq"`
	Batches  time.Duration `json:"batches"`
}

const day = 24 * time.Hour

// Defaults are the ages when no policy says otherwise:
//
//	status    1 day:   a finished job's status only repeats its report's figures
//	journal   7 days:  enough to inspect or replay a job; the bulk (one entry per step)
//	dlq       7 days:  enough to notice and replay dead letters (the stream's own max age is 30 days)
//	reports   30 days: the result people fetch
//	registry  30 days: the job's spec and state, kept with its report
//	batches   30 days: a batch's record and lines (the lines stream's own max age is 30 days)
var Defaults = Ages{Journal: 7 * day, Reports: 30 * day, Registry: 30 * day, Status: day, DLQ: 7 * day, Batches: 30 * day}

// Policy is the retention policy of the whole fleet: the fleet's record
// and the overrides of tenants and jobs.
type Policy struct {
	Fleet   schemas.RetentionAges
	Tenants map[string]schemas.RetentionAges // by tenant
	Jobs    map[string]schemas.RetentionAges // by <tenant>.<job>
}

// For returns the ages of tenant's job: each kind from the job's policy,
// else the tenant's, else the fleet's, else Defaults. job "" is the
// tenant's ages. The registry record is kept at least as long as the
// job's journal, report and status (it is how a sweep finds them).
func (p Policy) For(tenant, job string) Ages {
	layers := []schemas.RetentionAges{p.Fleet, p.Tenants[tenant]}
	if job != "" {
		layers = append(layers, p.Jobs[bus.JobKey(tenant, job)])
	}
	a := Defaults
	for _, l := range layers {
		set(&a.Journal, l.JournalSeconds)
		set(&a.Reports, l.ReportsSeconds)
		set(&a.Registry, l.RegistrySeconds)
		set(&a.Status, l.StatusSeconds)
		set(&a.DLQ, l.DLQSeconds)
		set(&a.Batches, l.BatchesSeconds)
	}
	a.Registry = longest(a.Registry, a.Journal, a.Reports, a.Status)
	return a
}

func set(d *time.Duration, secs *int64) {
	if secs != nil {
		*d = time.Duration(*secs) * time.Second
	}
}

// longest is the longest of ds, 0 (forever) if any is.
func longest(ds ...time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		if d == 0 {
			return 0
		}
		m = max(m, d)
	}
	return m
}

// Due reports whether something that ended at ended is past age at now.
func Due(ended, now time.Time, age time.Duration) bool {
	return age > 0 && !ended.IsZero() && !ended.After(now.Add(-age))
}

// OpenBucket returns the retention bucket of topo's namespace, created
// as the topology declares it (topology.FeatureBucket) when missing.
func OpenBucket(ctx context.Context, topo *topology.Topology) (jetstream.KeyValue, error) {
	kv, err := topology.FeatureBucket(ctx, topo.JS, topo.Config, topo.NS.RetentionBucket(), true)
	if err != nil {
		return nil, fmt.Errorf("retention: bucket %s: %w", topo.NS.RetentionBucket(), err)
	}
	return kv, nil
}

// Key is the retention bucket's key of a policy: the fleet's (tenant "",
// "_fleet"), a tenant's (job "", "<tenant>") or a job's
// ("job.<tenant>.<job>").
func Key(tenant, job string) string {
	switch {
	case tenant == "":
		return schemas.FleetRetentionKey
	case job == "":
		return tenant
	}
	return jobKeyPrefix + bus.JobKey(tenant, job)
}

// jobKeyPrefix starts the keys of jobs' policies: three parts, where a
// tenant's key has one and the sweep's lease (leaseTenant.leaseJob) two.
const jobKeyPrefix = "job."

// policyKey reports whether key names a policy (not the sweep's lease).
func policyKey(key string) bool { return strings.Count(key, ".") != 1 }

// Load reads every policy in kv. An unreadable record is skipped (and
// named in the error returned with the policy read).
func Load(ctx context.Context, kv jetstream.KeyValue) (Policy, error) {
	p := Policy{Tenants: map[string]schemas.RetentionAges{}, Jobs: map[string]schemas.RetentionAges{}}
	recs, err := List(ctx, kv)
	for _, r := range recs {
		switch {
		case r.Tenant == "":
			p.Fleet = r.RetentionAges
		case r.JobID == "":
			p.Tenants[r.Tenant] = r.RetentionAges
		default:
			p.Jobs[bus.JobKey(r.Tenant, r.JobID)] = r.RetentionAges
		}
	}
	return p, err
}

// List returns every policy record in kv, fleet first, then by key.
func List(ctx context.Context, kv jetstream.KeyValue) ([]schemas.RetentionPolicy, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("retention: list policies: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var keys []string
	for k := range lister.Keys() {
		if policyKey(k) {
			keys = append(keys, k)
		}
	}
	var out []schemas.RetentionPolicy
	var errs []error
	for _, k := range sortKeys(keys) {
		r, err := Get(ctx, kv, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

func sortKeys(keys []string) []string {
	out := make([]string, 0, len(keys))
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	// The fleet's key sorts first ('_' after letters in ASCII, so by hand).
	slices.SortFunc(out, func(a, b string) int {
		if (a == schemas.FleetRetentionKey) != (b == schemas.FleetRetentionKey) {
			if a == schemas.FleetRetentionKey {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return out
}

// Get reads the policy under key.
func Get(ctx context.Context, kv jetstream.KeyValue, key string) (schemas.RetentionPolicy, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return schemas.RetentionPolicy{}, fmt.Errorf("retention: policy %s: %w", key, err)
	}
	var r schemas.RetentionPolicy
	if err := schemas.Decode(e.Value(), &r); err != nil {
		return schemas.RetentionPolicy{}, fmt.Errorf("retention: policy %s: %w", key, err)
	}
	return r, nil
}

// Set merges ages into the policy of tenant's job (tenant "": the
// fleet's; job "": the tenant's): the fields ages sets replace the stored
// ones, the others stay. It returns the policy stored.
func Set(ctx context.Context, kv jetstream.KeyValue, tenant, job string, ages schemas.RetentionAges, now time.Time) (schemas.RetentionPolicy, error) {
	key := Key(tenant, job)
	for {
		cur := schemas.RetentionPolicy{Header: schemas.NewHeader(schemas.KindRetentionPolicy), Tenant: tenant, JobID: job}
		var rev uint64
		if e, err := kv.Get(ctx, key); err == nil {
			if derr := schemas.Decode(e.Value(), &cur); derr != nil {
				cur = schemas.RetentionPolicy{Header: schemas.NewHeader(schemas.KindRetentionPolicy), Tenant: tenant, JobID: job}
			}
			rev = e.Revision()
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return cur, fmt.Errorf("retention: policy %s: %w", key, err)
		}
		merge(&cur.RetentionAges, ages)
		cur.UpdatedAt = now.UTC()
		data, err := schemas.Encode(&cur)
		if err != nil {
			return cur, fmt.Errorf("retention: policy %s: %w", key, err)
		}
		if rev == 0 {
			_, err = kv.Create(ctx, key, data)
		} else {
			_, err = kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return cur, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return cur, fmt.Errorf("retention: store policy %s: %w", key, err)
		}
		if ctx.Err() != nil {
			return cur, ctx.Err()
		}
		// Another writer got in between: merge into theirs.
	}
}

// Unset removes the policy of tenant's job (or the tenant's, or the
// fleet's): it inherits again.
func Unset(ctx context.Context, kv jetstream.KeyValue, tenant, job string) error {
	if err := kv.Purge(ctx, Key(tenant, job)); err != nil {
		return fmt.Errorf("retention: remove policy: %w", err)
	}
	return nil
}

func merge(dst *schemas.RetentionAges, src schemas.RetentionAges) {
	for _, f := range []struct{ d, s **int64 }{
		{&dst.JournalSeconds, &src.JournalSeconds}, {&dst.ReportsSeconds, &src.ReportsSeconds},
		{&dst.RegistrySeconds, &src.RegistrySeconds}, {&dst.StatusSeconds, &src.StatusSeconds},
		{&dst.DLQSeconds, &src.DLQSeconds}, {&dst.BatchesSeconds, &src.BatchesSeconds},
	} {
		if *f.s != nil {
			v := **f.s
			*f.d = &v
		}
	}
}
