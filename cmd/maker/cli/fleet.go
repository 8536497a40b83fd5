package cli

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleet"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// fleetOptions say which services the in-process fleet of run and bench
// uses: external ones when their URL is set, development servers otherwise.
type fleetOptions struct {
	natsURL    string
	redisURL   string
	llmBaseURL string
	apiKey     string
	model      string
	dataDir    string
	// redisServer: with no redisURL, start a redis-server process (if
	// installed) instead of miniredis. The benchmark wants real Redis.
	redisServer bool
	sim         simllm.Config
	// simHTTP serves the simulated model on a loopback port rather than
	// in memory.
	simHTTP     bool
	concurrency int
	// samplesPerCall is the coordinator's SamplesPerCall; supportsN says
	// the voter's model answers n (the simulated model does).
	samplesPerCall int
	supportsN      bool
	// stream asks the model for streamed replies.
	stream bool
	// ownServer: the fleet's embedded nats-server lives and dies with
	// the command, so its work queues are kept in memory (busConfig). The
	// journal stays on file.
	ownServer bool
	// workDuplicates and journalDuplicates are the streams' duplicate
	// windows (--work-duplicates, --journal-duplicates; zero: the
	// defaults).
	workDuplicates, journalDuplicates time.Duration
	// maxJobs is how many jobs the coordinator runs at once (default
	// coordinator.Config's).
	maxJobs int
	// prices are the private fleet's price table: the job's own prices,
	// which on the operator's own fleet are the fleet's (jobPrices).
	prices []schemas.ModelPrice
	log    *slog.Logger
}

// jobPrices are the prices spec claims (its pricing, the escalation's
// stronger_pricing) as a price table: maker run's own fleet prices its
// one job as the job says, since the operator is the tenant.
func jobPrices(spec *schemas.JobSpec) []schemas.ModelPrice {
	var out []schemas.ModelPrice
	add := func(model string, p *schemas.Pricing) {
		if p != nil {
			out = append(out, schemas.ModelPrice{Model: model, Default: model == "", InputUSDPerMTok: p.InputUSDPerMTok, OutputUSDPerMTok: p.OutputUSDPerMTok})
		}
	}
	add("", spec.Pricing)
	for _, m := range spec.Models {
		add(m, spec.Pricing)
	}
	if e := spec.Escalation; e != nil && e.StrongerModel != "" {
		if e.StrongerPricing != nil {
			add(e.StrongerModel, e.StrongerPricing)
		} else {
			add(e.StrongerModel, spec.Pricing)
		}
	}
	return out
}

// startFleet starts a private fleet (a namespace of its own, removed at
// Close from servers it did not start) with one coordinator and one voter.
func startFleet(ctx context.Context, o fleetOptions) (*fleet.Fleet, error) {
	f, err := fleet.Start(ctx, fleet.Options{
		NATSURL: o.natsURL, DataDir: o.dataDir, RedisURL: o.redisURL, RedisServer: o.redisServer,
		LLMBaseURL: o.llmBaseURL, APIKey: o.apiKey, Model: o.model, Sim: o.sim, SimHTTP: o.simHTTP,
		LLM: llm.Config{Stream: o.stream}, Private: true, Logger: o.log, Bus: o.busConfig(),
		Coordinators: 1, Coordinator: coordinator.Config{ID: "coordinator-inproc", MaxJobs: o.maxJobs, SamplesPerCall: o.samplesPerCall},
		// The private fleet answers only this command's own job, whose
		// flags are the user's own: its voter takes whatever the job asks.
		Voters: 1, Voter: voter.Config{ID: "voter-inproc", Concurrency: o.concurrency, SupportsN: o.supportsN, Policy: voter.Policy{
			AllowModels: []string{voter.AnyModel}, MaxTokensCeiling: 1_000_000, TemperatureMax: 2}}, // a job spec's own limits
		Prices: o.prices,
	})
	if errors.Is(err, fleet.ErrOptions) {
		return nil, usageError{err}
	}
	return f, err
}

// busConfig is the topology's configuration for the fleet.
func (o fleetOptions) busConfig() topology.Config {
	c := topology.Config{WorkDuplicates: o.workDuplicates, JournalDuplicates: o.journalDuplicates}
	if o.ownServer {
		// Work in flight only: a lost sample is drawn again (docs/durability.md).
		c.WorkStorage = jetstream.MemoryStorage
	}
	return c
}

// errFleet wraps a role failure.
var errFleet = errors.New("fleet role stopped")
