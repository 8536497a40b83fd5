package cli

import (
	"context"
	"errors"
	"log/slog"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/fleet"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
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
	// stream asks the model for streamed replies.
	stream bool
	log    *slog.Logger
}

// startFleet starts a private fleet (a namespace of its own, removed at
// Close from servers it did not start) with one coordinator and one voter.
func startFleet(ctx context.Context, o fleetOptions) (*fleet.Fleet, error) {
	f, err := fleet.Start(ctx, fleet.Options{
		NATSURL: o.natsURL, DataDir: o.dataDir, RedisURL: o.redisURL, RedisServer: o.redisServer,
		LLMBaseURL: o.llmBaseURL, APIKey: o.apiKey, Model: o.model, Sim: o.sim, SimHTTP: o.simHTTP,
		LLM: llm.Config{Stream: o.stream}, Private: true, Logger: o.log,
		Coordinators: 1, Coordinator: coordinator.Config{ID: "coordinator-inproc"},
		// The private fleet answers only this command's own job, whose
		// flags are the user's own: its voter takes whatever the job asks.
		Voters: 1, Voter: voter.Config{ID: "voter-inproc", Concurrency: o.concurrency, Policy: voter.Policy{
			AllowModels: []string{voter.AnyModel}, MaxTokensCeiling: 1_000_000, TemperatureMax: 2}}, // a job spec's own limits
	})
	if errors.Is(err, fleet.ErrOptions) {
		return nil, usageError{err}
	}
	return f, err
}

// errFleet wraps a role failure.
var errFleet = errors.New("fleet role stopped")
