package coordinator

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// The ports of a job's shell: what it keeps besides the bus, each behind
// the few methods the shell calls. Storage in Config names them; what is
// left nil is the fleet's adapter (Redis through internal/store, the
// journal stream through internal/journal, the registry bucket through
// internal/jobs).

// Tally counts a job's votes by the rule of internal/core/vote, once and
// atomically for every coordinator: *store.Store (its Lua) in a fleet.
type Tally interface {
	// OpenStep opens step under epoch; a later epoch already open is
	// vote.ErrStaleOpen.
	OpenStep(ctx context.Context, job store.JobRef, step, epoch int64) (c vote.Counters, opened bool, err error)
	// RecordMany records samples in order and returns each one's outcome.
	RecordMany(ctx context.Context, job store.JobRef, samples []vote.Sample, k int) ([]vote.RecordResult, error)
	// CloseStep closes the open step undecided and returns its tally.
	CloseStep(ctx context.Context, job store.JobRef, step, epoch int64) (tally []schemas.TallyEntry, closed bool, err error)
	// DeleteJob forgets a finished job's tally.
	DeleteJob(ctx context.Context, job store.JobRef) error
}

// Budgets holds jobs' and tenants' money, reserve-then-settle:
// *store.Budgets (Redis) in a fleet.
type Budgets interface {
	Reserve(ctx context.Context, rv store.Reservation) (store.Figures, error)
	Settle(ctx context.Context, s store.Settlement) (store.Figures, error)
	Claim(ctx context.Context, job store.JobRef, token int64, jobLimit pricing.Nano) (store.Account, error)
	Job(ctx context.Context, job store.JobRef) (store.Account, error)
}

// Journals opens a job's decision journal as its one writer.
type Journals interface {
	// Open returns the journal positioned after its last entry and what
	// a new owner resumes from.
	Open(ctx context.Context, tenant, job string) (Journal, *journal.Resume, error)
}

// Journal is one job's decision journal, fenced by its owner
// (*journal.Journal on the journal stream in a fleet).
type Journal interface {
	// Start appends e and waits until it is stored.
	Start(ctx context.Context, e *schemas.JournalEntry) error
	// Append appends e while work goes on; the next call waits for it.
	Append(ctx context.Context, e *schemas.JournalEntry) (uint64, error)
	// Flush waits for the appends in flight.
	Flush(ctx context.Context) error
	// Checkpoint stores c after the last entry.
	Checkpoint(ctx context.Context, c *schemas.Checkpoint) error
	// LastSeq is the sequence of the last entry appended.
	LastSeq() uint64
}

// Registry is the job registry as a coordinator writes it.
type Registry interface {
	Get(ctx context.Context, tenant, job string) (schemas.JobRecord, uint64, error)
	MarkState(ctx context.Context, tenant, job, state string) error
	MarkFinished(ctx context.Context, tenant, job, state string) error
}

// Storage names the ports' adapters; nil ones are the fleet's.
type Storage struct {
	// Tally: default the store given to New.
	Tally Tally
	// Budgets: default Redis budgets on the store's client and prefix.
	Budgets Budgets
	// Journals: default the journal stream of the coordinator's
	// namespace.
	Journals Journals
	// Registry: default the registry bucket of the coordinator's
	// namespace.
	Registry Registry
}

// streamJournals opens journals on the namespace's journal stream.
type streamJournals struct {
	js   jetstream.JetStream
	topo *topology.Topology
}

func (s streamJournals) Open(ctx context.Context, tenant, job string) (Journal, *journal.Resume, error) {
	j, res, err := journal.Open(ctx, s.js, s.topo.NS, tenant, job)
	if err != nil {
		return nil, nil, err
	}
	return j, res, nil
}

// kvRegistry is the registry bucket of a topology.
type kvRegistry struct{ topo *topology.Topology }

func (k kvRegistry) Get(ctx context.Context, tenant, job string) (schemas.JobRecord, uint64, error) {
	return jobs.Get(ctx, k.topo, tenant, job)
}

func (k kvRegistry) MarkState(ctx context.Context, tenant, job, state string) error {
	return jobs.MarkState(ctx, k.topo, tenant, job, state)
}

func (k kvRegistry) MarkFinished(ctx context.Context, tenant, job, state string) error {
	return jobs.MarkFinished(ctx, k.topo, tenant, job, state)
}
