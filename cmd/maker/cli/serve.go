package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/dashboard"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/internal/quota"
	"github.com/makerfleet/makerfleet/internal/service"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// serveShutdown bounds how long maker serve waits for requests in progress
// when it stops.
const serveShutdown = 10 * time.Second

func serveCmd(e *env) *cobra.Command {
	var (
		natsURL, redisURL, addr, tlsCert, tlsKey string
		metricsAddr                              string
		cfg                                      api.Config
		hooks                                    webhookFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP/JSON API (jobs, batches, tasks, usage, quotas) for API keys",
		Long: `serve answers the fleet's HTTP/JSON API: POST /v1/jobs, GET /v1/jobs/{id}, its result and
events (SSE), batches (JSONL), tasks, usage and quotas; GET /openapi.json is the OpenAPI 3.1
document and GET /healthz needs no key. /dashboard/ is a live dashboard for the browser
(its assets need no key: the page asks for one and reads the API with it); / redirects there.
Every other request carries an API key made by maker keys create (Authorization: Bearer KEY)
and acts for the key's tenant only.

It binds the fleet's topology (started first, it waits for a coordinator or maker topology
create to make it) and reads budgets and samples in flight from the fleet's Redis.`,
		Example: `  maker serve --nats nats://127.0.0.1:4222 --redis redis://127.0.0.1:6379/0 --addr 127.0.0.1:8000
  curl -H "Authorization: Bearer $KEY" -d '{"task":"hanoi","params":{"disks":3},"k":3}' \
       -H 'Content-Type: application/json' http://127.0.0.1:8000/v1/jobs`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (tlsCert == "") != (tlsKey == "") {
				return usagef("--tls-cert and --tls-key go together")
			}
			if cfg.RatePerSec < 0 || cfg.Burst < 0 || cfg.MaxBodyBytes < 0 || cfg.MaxJobBytes < 0 || cfg.MaxBatchBytes < 0 {
				return usagef("--rate, --burst, --max-body-bytes, --max-job-bytes and --max-batch-bytes must be >= 0")
			}
			ctx := cmd.Context()
			log := e.logger(slog.LevelInfo)
			rdb, err := dialRedis(ctx, redisURL)
			if err != nil {
				return err
			}
			defer rdb.Close()
			nc, err := bus.Connect(natsURL, connName("serve", ""), natsAuth(ctx))
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			// Metrics first: alive (and not ready) while the topology is
			// awaited.
			reg := newRoleMetrics(metricsAddr, "serve")
			if reg != nil {
				e.httpMetrics = metrics.NewHTTP(reg) // counted in serveHTTP
			}
			stopMetrics, err := startRoleMetrics(ctx, e, log, metricsAddr, reg, nc, rdb)
			if err != nil {
				return err
			}
			defer stopMetrics()
			// The topology is the coordinators' to create: started first,
			// serve waits for it.
			topo, err := topology.Ensure(ctx, js, topology.Config{Await: true, Logger: log})
			if err != nil {
				return err
			}
			keys := apikey.New(topo)
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return usagef("--addr: %v", err)
			}
			deliver, secret, err := hooks.deliverer(ctx, topo, log, ln.Addr(), metricsAddr)
			if err != nil {
				_ = ln.Close()
				return err
			}
			srv, caches, err := newAPIServer(log, nc, topo, rdb, keys, cfg, secret)
			if err != nil {
				_ = ln.Close()
				return err
			}
			if deliver != nil {
				caches = append(caches, service.Func("webhooks", deliver.Run))
			}
			scheme := "http"
			if tlsCert != "" {
				scheme = "https"
			}
			// The caches start first and stop last: the server is shut
			// down (requests finish) while they still answer.
			return service.Run(ctx, append(caches, service.Func("http", func(ctx context.Context) error {
				return serveHTTP(ctx, e, log, srv, ln, tlsCert, tlsKey, scheme)
			}))...)
		},
	}
	natsFlag(cmd, &natsURL)
	fl := cmd.Flags()
	fl.StringVar(&redisURL, "redis", envOr("MAKER_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL of the fleet (as the coordinators') [$MAKER_REDIS_URL]")
	fl.StringVar(&addr, "addr", envOr("MAKER_API_ADDR", "127.0.0.1:8000"), "listen address HOST:PORT (port 0: any free port) [$MAKER_API_ADDR]")
	fl.StringVar(&tlsCert, "tls-cert", "", "serve HTTPS with this certificate (with --tls-key)")
	fl.StringVar(&tlsKey, "tls-key", "", "the certificate's key")
	fl.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", 1<<20, "largest JSON request body (413 above)")
	fl.Int64Var(&cfg.MaxJobBytes, "max-job-bytes", schemas.MaxParamsBytes+64<<10, "largest job body (POST /v1/jobs), whose params may be as large as the fleet keeps (413 above)")
	fl.Int64Var(&cfg.MaxBatchBytes, "max-batch-bytes", 256<<20, "largest batch body (413 above)")
	fl.Int64Var(&cfg.MaxTenantBatchBytes, "tenant-batch-bytes", 512<<20, "most bytes of lines one tenant's open batches hold together (429 above)")
	fl.IntVar(&cfg.MaxStreamsPerTenant, "tenant-streams", 32, "most event streams one tenant's keys hold open together (429 above)")
	fl.Float64Var(&cfg.RatePerSec, "rate", 20, "requests per second per API key, for keys that set none")
	fl.IntVar(&cfg.Burst, "burst", 40, "request burst per API key, for keys that set no rate")
	hooks.add(cmd)
	metricsFlag(cmd, &metricsAddr)
	tracingFlags(e, cmd, "serve")
	return cmd
}

// serveHTTP serves srv on ln until ctx ends, then stops: event streams are
// ended, and requests in progress get up to serveShutdown to finish.
func serveHTTP(ctx context.Context, e *env, log *slog.Logger, srv *api.Server, ln net.Listener, cert, key, scheme string) error {
	hs := &http.Server{
		// The dashboard under /dashboard/ (and / redirects there); the rest
		// is the API.
		Handler:           e.httpMetrics.Middleware(dashboard.Wrap(srv)), // no middleware without --metrics-addr
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	hs.RegisterOnShutdown(srv.CloseStreams)
	done := make(chan error, 1)
	go func() { // owned: ends when hs is shut down below
		if cert != "" {
			done <- hs.ServeTLS(ln, cert, key)
			return
		}
		done <- hs.Serve(ln)
	}()
	url := fmt.Sprintf("%s://%s", scheme, ln.Addr())
	// The dashboard's line first: "listening" is the last line of the start.
	log.Info("dashboard", "url", url+dashboard.Path)
	fmt.Fprintf(e.stderr, "dashboard: %s%s\n", url, dashboard.Path)
	log.Info("API listening", "url", url)
	fmt.Fprintf(e.stderr, "maker serve listening on %s\n", url)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), serveShutdown)
	defer cancel()
	err := hs.Shutdown(sctx)
	if serr := <-done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// newAPIServer assembles the API on the fleet's topology and Redis: keys,
// quotas and prices (caches fed by watches of their buckets), budgets,
// samples in flight and batches. caches are the services that feed it,
// to run (internal/service) before the server.
func newAPIServer(log *slog.Logger, nc *nats.Conn, topo *topology.Topology, rdb redis.UniversalClient, keys *apikey.Store, cfg api.Config,
	webhookSecret func(tenant string) string,
) (_ *api.Server, caches []service.Service, err error) {
	quotas := quota.New(topo)
	prices := pricetable.NewCache(topo.Prices)
	budgets, err := store.NewBudgets(rdb, store.BudgetConfig{})
	if err != nil {
		return nil, nil, err
	}
	cfg.Logger = log
	tasks := builtin.Registry()
	srv, err := api.New(api.Deps{
		NC: nc, Topo: topo, Tasks: tasks, Auth: keys, Quotas: quotas, Prices: prices, Forecast: pricing.Forecast,
		Budgets: budgets, Inflight: store.NewLimiter(rdb, store.DefaultKeyPrefix),
		Batches:       batch.NewStore(topo, taskreg.New(topo.Tasks, tasks, taskspec.CompileSpec)),
		WebhookSecret: webhookSecret,
	}, cfg)
	if err != nil {
		return nil, nil, usageError{err}
	}
	// Each watch ends with its service's ctx; Wait is its stop.
	return srv, []service.Service{
		service.Started("api keys", func(ctx context.Context) (func(), error) { return keys.Stop, keys.Start(ctx) }),
		service.Started("quotas", func(ctx context.Context) (func(), error) { return quotas.Wait, quotas.Start(ctx) }),
		service.Started("prices", func(ctx context.Context) (func(), error) { return prices.Wait, prices.Start(ctx) }),
	}, nil
}
