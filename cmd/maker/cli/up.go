package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/client"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/app/fleet"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/service"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

// upDefaultLatency slows the simulated model of maker up so that a job's
// progress can be watched on the dashboard.
const upDefaultLatency = 20 * time.Millisecond

func upCmd(e *env) *cobra.Command {
	var (
		sf                simFlags
		svc               serviceFlags
		addr, metricsAddr string
		tenant            string
		voters, demoDisks int
		cfg               api.Config
		hooks             webhookFlags
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring up a whole local fleet with the API, the live dashboard and metrics (Ctrl-C stops it)",
		Long: `up starts a complete fleet in this process for trying makerfleet out and for
watching it: an embedded nats-server, a redis-server on a free port (the embedded
Redis-compatible store when redis-server is not installed), the simulated model (20ms a call, so progress can be followed), one coordinator,
--voters voters, the HTTP/JSON API with the live dashboard (maker serve's) and one
/metrics, /healthz and /readyz endpoint for all of them.

It makes an API key for --tenant and prints it with the URLs, submits a demo job
(hanoi, --demo-disks disks; 0: none) and runs until Ctrl-C. The printed NATS URL
works with every other command: export MAKER_NATS_URL=URL (or give --nats URL), then
maker submit, maker jobs list, maker status JOB, maker keys create. The key's tenant
is the one every command defaults to (default), so its jobs list without --tenant.`,
		Example: `  maker up
  maker up --addr 127.0.0.1:8000 --metrics-addr 127.0.0.1:9090 --voters 4 --demo-disks 12`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if voters < 1 {
				return usagef("--voters must be >= 1, got %d", voters)
			}
			if demoDisks < 0 || demoDisks > 20 {
				return usagef("--demo-disks must be 0..20, got %d", demoDisks)
			}
			if err := schemas.ValidTenant(tenant); err != nil {
				return usagef("--tenant: %v", err)
			}
			if !cmd.Flags().Changed("sim-latency") {
				sf.latency = upDefaultLatency
			}
			// A role that fails stops the whole fleet: ctx ends the server.
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			log := e.logger(slog.LevelInfo)
			sim, err := sf.config(1)
			if err != nil {
				return err
			}
			opts, err := svc.options(sim, log)
			if err != nil {
				return err
			}
			// Listen first: a taken port is a usage error before anything
			// starts.
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return usagef("--addr: %v", err)
			}
			defer ln.Close()
			reg := metrics.NewRegistry("up", Version)
			e.httpMetrics = metrics.NewHTTP(reg)
			f, err := fleet.Start(ctx, fleet.Options{
				NATSURL: opts.natsURL, DataDir: opts.dataDir, RedisURL: opts.redisURL, RedisServer: true,
				LLMBaseURL: opts.llmBaseURL, APIKey: opts.apiKey, Model: opts.model, Sim: opts.sim,
				LLM: llm.Config{Stream: opts.stream}, Bus: opts.busConfig(),
				Logger: log, Coordinators: 1, Voters: voters,
				Coordinator: coordinator.Config{ID: "coordinator-up", Metrics: metrics.NewCoordinator(reg)},
				Voter: voter.Config{Concurrency: opts.concurrency, Metrics: metrics.NewVoter(reg), Policy: voter.Policy{
					AllowModels: []string{voter.AnyModel}, MaxTokensCeiling: 1_000_000, TemperatureMax: 2}},
			})
			if err != nil {
				return err
			}
			defer f.Close()
			rdb, _, err := store.NewRedisClient(f.RedisURL)
			if err != nil {
				return err
			}
			defer rdb.Close()
			reg.QueueLag(f.JS, queueConsumers(f.Bus.Namespace)...)
			stopMetrics, err := startMetrics(ctx, e, log, metricsAddr, reg, natsReady(f.NC), redisReady(rdb),
				topologyReady(f.JS, f.Bus.Namespace.JobsStream(), f.Bus.Namespace.SamplesStream()))
			if err != nil {
				return err
			}
			defer stopMetrics()
			keys := apikey.New(f.Topo)
			key, _, err := keys.Create(ctx, apikey.CreateOptions{Tenant: tenant, Admin: true, Name: "maker up"})
			if err != nil {
				return err
			}
			deliver, secret, err := hooks.deliverer(ctx, f.Topo, log, ln.Addr(), metricsAddr)
			if err != nil {
				return err
			}
			srv, caches, err := newAPIServer(log, f.NC, f.Topo, rdb, keys, cfg, secret)
			if err != nil {
				return err
			}
			if deliver != nil {
				caches = append(caches, service.Func("webhooks", deliver.Run))
			}
			if demoDisks > 0 {
				if err := submitDemo(ctx, f, tenant, demoDisks); err != nil {
					return err
				}
			}
			url := "http://" + ln.Addr().String()
			fmt.Fprintf(e.stderr, "maker up: a local fleet (1 coordinator, %d voters, %s model) runs until Ctrl-C\n", voters, modelKind(opts))
			fmt.Fprintf(e.stderr, "  NATS:    %s  (export MAKER_NATS_URL=%s, then: maker jobs list)\n", f.NATSURL, f.NATSURL)
			fmt.Fprintf(e.stderr, "  Redis:   %s\n", f.RedisURL)
			fmt.Fprintf(e.stderr, "  API key (tenant %s, admin): %s\n", tenant, key)
			fmt.Fprintf(e.stderr, "  try:     curl -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{\"task\":\"hanoi\",\"params\":{\"disks\":8},\"k\":3}' %s/v1/jobs\n", key, url)
			// A role of the fleet that stops stops everything (the watch
			// fails); Ctrl-C stops the server first, the caches last.
			watch := service.Func("fleet", func(ctx context.Context) error {
				select {
				case err := <-f.Failed():
					log.Error("a fleet role stopped", "err", err)
					return fmt.Errorf("%w: %w", errFleet, err)
				case <-ctx.Done():
					return nil
				}
			})
			return service.Run(ctx, append(caches, watch, service.Func("http", func(ctx context.Context) error {
				return serveHTTP(ctx, e, log, srv, ln, "", "", "http")
			}))...)
		},
	}
	addSimFlags(cmd, &sf)
	addServiceFlags(cmd, &svc)
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "127.0.0.1:8000", "the API's and dashboard's listen address HOST:PORT (port 0: any free port)")
	fl.StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9090", "serve /metrics, /healthz and /readyz on HOST:PORT (empty: off)")
	fl.StringVar(&tenant, "tenant", schemas.DefaultTenant, "the tenant of the printed API key and of the demo job (the tenant every other command defaults to)")
	fl.IntVar(&voters, "voters", 2, "voters to run")
	fl.IntVar(&demoDisks, "demo-disks", 10, "submit a hanoi job with this many disks at start (0: none)")
	fl.Float64Var(&cfg.RatePerSec, "rate", 20, "API requests per second per key")
	fl.IntVar(&cfg.Burst, "burst", 40, "API request burst per key")
	hooks.add(cmd)
	return cmd
}

// modelKind names the voters' model for maker up's banner.
func modelKind(o fleetOptions) string {
	if o.llmBaseURL != "" {
		return o.model + " at " + o.llmBaseURL
	}
	return "the simulated"
}

// submitDemo queues the banner's demo job: hanoi with disks disks, k=3.
func submitDemo(ctx context.Context, f *fleet.Fleet, tenant string, disks int) error {
	cl, err := client.New(f.NC, client.WithTenant(tenant), client.WithNamespace(string(f.Bus.Namespace)), client.WithTaskSpecs(taskspec.CompileSpec))
	if err != nil {
		return err
	}
	params, _ := json.Marshal(map[string]int{"disks": disks})
	_, err = cl.Submit(ctx, schemas.JobSpec{Task: "hanoi", Params: params, K: 3})
	if err != nil {
		return fmt.Errorf("demo job: %w", err)
	}
	return nil
}
