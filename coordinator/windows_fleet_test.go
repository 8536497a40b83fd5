package coordinator_test

import (
	"context"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// The guarantees the duplicate windows were sized on (docs/durability.md
// "Duplicate windows"), on a real fleet.

// copier publishes a second copy of every message on subject (once per
// message of the fleet's), through a connection of its own, and keeps
// what the stream said of each copy.
type copier struct {
	t  *testing.T
	js jetstream.JetStream

	mu     sync.Mutex
	seen   map[string]bool // the fleet's messages copied, by their data
	stored int             // copies the stream stored
	dups   int             // copies the stream dropped as duplicates
	withID int             // the fleet's messages that carried a Nats-Msg-Id
}

func startCopier(t *testing.T, env *fleettest.Env, subject string) *copier {
	t.Helper()
	js, err := jetstream.New(env.Connect("copier"))
	if err != nil {
		t.Fatal(err)
	}
	c := &copier{t: t, js: js, seen: map[string]bool{}}
	sub, err := env.NC.Subscribe(subject, c.copy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c
}

func (c *copier) copy(m *nats.Msg) {
	c.mu.Lock()
	if c.seen[string(m.Data)] {
		c.mu.Unlock()
		return // a copy of ours
	}
	c.seen[string(m.Data)] = true
	if m.Header.Get(jetstream.MsgIDHeader) != "" {
		c.withID++
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), gateTimeout)
	defer cancel()
	ack, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	if err != nil {
		c.t.Errorf("copy of %s: %v", m.Subject, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ack.Duplicate {
		c.dups++
	} else {
		c.stored++
	}
}

func (c *copier) counts() (copied, stored, dups, withID int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen), c.stored, c.dups, c.withID
}

// copiedJob runs a 3-disk job at k 2 (its steps and k returned) on a fleet
// whose model answers right, its voter working on concurrency requests at
// once, while a copier copies every message on the subject subject names.
func copiedJob(t *testing.T, jobSeed int64, concurrency int, subject func(ns bus.Namespace, spec schemas.JobSpec) string) (
	rep schemas.JobReport, model *fleettest.FakeModel, cp *copier, steps, k int64,
) {
	t.Helper()
	const disks = 3
	steps, k = 1<<disks-1, 2
	env := fleettest.New(t)
	model = fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, steps, 64), nil)
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(model, voter.Config{Concurrency: concurrency})
	spec := fleettest.HanoiSpec(disks, int(k), jobSeed)
	cp = startCopier(t, env, subject(env.Topo.NS, spec))
	rep = env.Run(&spec)
	checkSolved(t, rep, disks)
	return rep, model, cp, steps, k
}

// promptTokens is what the fake model claims a call: each answer the
// report accounts adds it once.
const promptTokens = 120

// accounted is how many answers the report accounts for.
func accounted(rep schemas.JobReport) int64 {
	return rep.Samples + rep.LateSamples + rep.DuplicateResults + rep.SpeculativeWasted
}

// TestRequestCopiesCountOnce: sample requests carry no message id, so
// the samples stream, whose window is then free, no longer drops a second
// copy of one: every request here reaches the voters twice, and the model
// answers both. The copy's answer carries its original's result id (the
// same sample, token and delivery count) when the voter grouped the
// copy's answers alike, so the results stream drops it; grouped otherwise
// it reaches the job, often steps after its own was decided, and the job
// recognises an index that step counted: the job solves with the golden
// trace and k votes a step, and the report accounts each of those answers
// once. (Under load this failed when a copy came two steps late, while
// only the last decided step was recognised.) (The copies' calls, which nothing
// the job trusts asked for, are not billed to it.)
func TestRequestCopiesCountOnce(t *testing.T) {
	t.Parallel()
	rep, model, cp, steps, k := copiedJob(t, 41, 2, func(ns bus.Namespace, spec schemas.JobSpec) string {
		return ns.SampleSubject(spec.Tenant, spec.JobID)
	})
	copied, stored, dups, withID := cp.counts()
	if withID != 0 {
		t.Errorf("%d of %d sample requests carry a Nats-Msg-Id, want none", withID, copied)
	}
	if copied == 0 || stored != copied || dups != 0 {
		t.Fatalf("%d requests copied: %d copies stored, %d dropped as duplicates; want every copy stored", copied, stored, dups)
	}
	if rep.Samples != steps*k || rep.Votes != steps*k {
		t.Errorf("samples %d, votes %d; want each of the %d indexes counted once", rep.Samples, rep.Votes, steps*k)
	}
	if n := accounted(rep); n != steps*k || rep.PromptTokens != promptTokens*n || int64(model.Calls()) < n {
		t.Errorf("%d answers accounted for %d prompt tokens (of %d model calls): want the %d counted, %d tokens each",
			n, rep.PromptTokens, model.Calls(), steps*k, promptTokens)
	}
	t.Logf("%d requests copied; model calls %d; report: samples %d, late %d, duplicates %d, skipped %d",
		copied, model.Calls(), rep.Samples, rep.LateSamples, rep.DuplicateResults, rep.SkippedSamples)
}

// TestResultCopiesUnderItsIDDropped: a voter retries a result's publish
// under the same message id (for up to 10s): the results stream's window
// (30s by default) drops every such copy, so an answer is counted and
// accounted once: exactly one answer accounted per model call, no
// duplicate counted.
func TestResultCopiesUnderItsIDDropped(t *testing.T) {
	t.Parallel()
	rep, model, cp, steps, k := copiedJob(t, 43, 1, func(ns bus.Namespace, spec schemas.JobSpec) string {
		return ns.ResultJobWildcard(spec.Tenant, spec.JobID)
	})
	checkNoWaste(t, rep)
	// The copies of the last answers may still be on their way.
	fleettest.Eventually(t, gateTimeout, func() bool {
		copied, stored, dups, _ := cp.counts()
		return copied > 0 && stored+dups == copied
	}, "the copies of the results to be published")
	copied, stored, dups, withID := cp.counts()
	if withID != copied || stored != 0 || dups != copied {
		t.Errorf("%d results (%d with a message id) copied: %d copies stored, %d dropped; want every one dropped as a duplicate",
			copied, withID, stored, dups)
	}
	if calls := int64(model.Calls()); rep.Samples != steps*k || calls != rep.Samples || rep.PromptTokens != promptTokens*calls {
		t.Errorf("samples %d, model calls %d, prompt tokens %d; want %d answers, each accounted once (%d tokens each)",
			rep.Samples, calls, rep.PromptTokens, steps*k, promptTokens)
	}
}
