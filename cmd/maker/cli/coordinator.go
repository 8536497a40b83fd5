package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
)

func coordinatorCmd(e *env) *cobra.Command {
	var (
		natsURL, redisURL, id, crashAt     string
		metricsAddr                        string
		maxJobs, checkpointEvery, replicas int
		samplesPerCall                     int
		leaseTTL, slice                    time.Duration
		retentionInterval                  time.Duration // retention.go
		arbReserve                         float64
		windows                            windowFlags
	)
	cmd := &cobra.Command{
		Use:     "coordinator",
		Short:   "Run a coordinator: takes jobs from NATS, drives their steps, tallies votes in Redis",
		Example: `  maker coordinator --nats nats://127.0.0.1:4222 --redis redis://127.0.0.1:6379/0`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if maxJobs < 1 {
				return usagef("--max-jobs must be >= 1")
			}
			if replicas < 1 || replicas > 5 {
				return usagef("--replicas must be 1..5")
			}
			if !(arbReserve > 0 && arbReserve <= schemas.MaxBudgetUSD) {
				return usagef("--arbitration-reserve-usd %v must be above 0 and at most %d", arbReserve, schemas.MaxBudgetUSD)
			}
			if crashAt != "" {
				if _, _, err := coordinator.ParseCrashAt(crashAt); err != nil {
					return usageError{err}
				}
			}
			log := e.logger(slog.LevelInfo)
			busCfg := topology.Config{Replicas: replicas, Logger: log}
			if err := windows.set(&busCfg); err != nil {
				return err
			}
			// One parser for every --redis: a server, TLS, Cluster or
			// Sentinel (store.ParseRedisURL); errors show it redacted.
			rdb, ropts, err := store.NewRedisClient(redisURL)
			if err != nil {
				return usagef("--redis: %v", err)
			}
			defer rdb.Close()
			// One clear error naming the server, before anything starts.
			pctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			err = rdb.Ping(pctx).Err()
			cancel()
			if err != nil {
				if ropts.Mode != store.ModeSingle {
					return fmt.Errorf("redis (%s) at %s: %w", ropts.Mode, ropts.Redacted, err)
				}
				return fmt.Errorf("redis at %s: %w", ropts.Redacted, err)
			}
			nc, err := bus.Connect(natsURL, connName("coordinator", id), natsAuth(cmd.Context()))
			if err != nil {
				return err
			}
			defer nc.Close()
			st, err := store.New(rdb, store.Config{})
			if err != nil {
				return err
			}
			reg := newRoleMetrics(metricsAddr, "coordinator")
			var met *metrics.Coordinator
			if reg != nil {
				met = metrics.NewCoordinator(reg)
			}
			var crash func(string)
			if crashAt != "" {
				crash = func(string) { os.Exit(137) } // what a SIGKILL leaves
			}
			c, err := coordinator.New(nc, st, coordinator.Config{
				ID: id, Tasks: builtin.Registry(), MaxJobs: maxJobs, Logger: log,
				LeaseTTL: leaseTTL, CheckpointEvery: checkpointEvery, CrashAt: crashAt, Crash: crash, Slice: slice, RetentionInterval: retentionInterval,
				ArbitrationReserveUSD: arbReserve, SamplesPerCall: samplesPerCall,
				Bus: busCfg, Metrics: met, Build: Version,
			})
			if err != nil {
				return usageError{err}
			}
			stopMetrics, err := startRoleMetrics(cmd.Context(), e, log, metricsAddr, reg, nc, rdb)
			if err != nil {
				return err
			}
			defer stopMetrics()
			return c.Run(cmd.Context())
		},
	}
	natsFlag(cmd, &natsURL)
	cmd.Flags().StringVar(&redisURL, "redis", envOr("MAKER_REDIS_URL", "redis://127.0.0.1:6379/0"),
		"Redis URL: redis://[USER:PASS@]HOST:PORT/DB, rediss:// for TLS (options tls_ca, tls_cert, tls_key), redis+cluster://HOST:PORT,HOST:PORT,... for Redis Cluster, redis+sentinel://HOST:26379,.../MASTER/DB for Sentinel [$MAKER_REDIS_URL]")
	cmd.Flags().IntVar(&maxJobs, "max-jobs", 16, "jobs this coordinator runs at once")
	cmd.Flags().IntVar(&samplesPerCall, "samples-per-call", schemas.MaxSamplesPerCall, "samples of a wave sent as one request and answered in one message (at most 16; 1: a message a sample): each drawn at its own temperature, those of one temperature (above 0) in one call when the voter's model answers n, the prompt paid once; others one call each")
	cmd.Flags().StringVar(&id, "id", "", "coordinator id, unique in the fleet (default coordinator-host-pid)")
	cmd.Flags().DurationVar(&leaseTTL, "lease-ttl", 10*time.Second, "a job whose coordinator stops renewing its lease is taken over after this long")
	cmd.Flags().DurationVar(&slice, "slice", 30*time.Second, "when full, hand a job back (at a step boundary) after it ran this long if another tenant's job waits (negative: never)")
	cmd.Flags().DurationVar(&retentionInterval, "retention-interval", 10*time.Minute, "sweep finished work past its retention policy (maker retention) this often, one coordinator at a time (negative: never)")
	cmd.Flags().IntVar(&checkpointEvery, "checkpoint-every", 1000, "steps between checkpoints (a resume reads at most this many journal entries)")
	cmd.Flags().IntVar(&replicas, "replicas", 1, "replicas of the streams and buckets this coordinator creates (3 on a clustered nats-server)")
	addWindowFlags(cmd, &windows, windowsKept)
	cmd.Flags().Float64Var(&arbReserve, "arbitration-reserve-usd", 1, "what a job under a budget or a spend quota holds for an arbitration of the judge's panel, in USD; the judge spends no more, and a job that cannot hold it gets a person instead")
	metricsFlag(cmd, &metricsAddr)
	cmd.Flags().StringVar(&crashAt, "crash-at", "", "fault injection for the fault suite: exit as if killed at <point>:<step>")
	_ = cmd.Flags().MarkHidden("crash-at")
	tracingFlags(e, cmd, "coordinator")
	cpuProfileFlag(cmd)
	return cmd
}
