package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// openTopo binds the fleet's topology on c's identity, as every client
// command does.
func openTopo(ctx context.Context, c *authtest.Conn) (*topology.Topology, error) {
	js, err := jetstream.New(c.Conn)
	if err != nil {
		return nil, err
	}
	return topology.Open(ctx, js, topology.Config{})
}

// readLines reads a stream's messages on subject in order, as a batch's
// output and error files are read.
func readLines(stream, subject string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		js, err := jetstream.New(c.Conn)
		if err != nil {
			return err
		}
		return bus.ReadOrdered(ctx, js, bus.ReadRange{Stream: stream, Subjects: []string{subject}}, func(uint64, []byte) error { return nil })
	}
}

// purgeSubject purges one subject of a stream (a refused batch's lines).
func purgeSubject(stream, subject string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		js, err := jetstream.New(c.Conn)
		if err != nil {
			return err
		}
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		return s.Purge(ctx, jetstream.WithPurgeSubject(subject))
	}
}

// keyCache starts and stops the API key cache maker serve runs.
func keyCache() action {
	return func(ctx context.Context, c *authtest.Conn) error {
		topo, err := openTopo(ctx, c)
		if err != nil {
			return err
		}
		s := apikey.New(topo)
		if err := s.Start(ctx); err != nil {
			return err
		}
		s.Stop()
		return nil
	}
}

// keyCreate makes an API key, as maker keys create does.
func keyCreate(tenant string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		topo, err := openTopo(ctx, c)
		if err != nil {
			return err
		}
		_, _, err = apikey.New(topo).Create(ctx, apikey.CreateOptions{Tenant: tenant})
		return err
	}
}

// registerJob registers a job of tenant, as maker serve does on submit.
func registerJob(tenant string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		topo, err := openTopo(ctx, c)
		if err != nil {
			return err
		}
		spec := fleettest.HanoiSpec(3, 1, 7)
		spec.Tenant = tenant
		if err := jobs.Prepare(ctx, &spec, taskreg.New(nil, builtin.Registry(), taskspec.CompileSpec)); err != nil {
			return err
		}
		rec := schemas.JobRecord{
			Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: tenant, JobID: spec.JobID, Spec: spec,
			Control: schemas.ControlRun, State: schemas.StateQueued, UpdatedAt: time.Now().UTC(),
		}
		return jobs.Register(ctx, topo, &rec)
	}
}

// priceSet sets a model's price in the fleet's price table, as maker
// prices set (or PUT /v1/prices/{model}) does.
func priceSet(model string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		topo, err := openTopo(ctx, c)
		if err != nil {
			return err
		}
		_, err = pricetable.Set(ctx, topo.Prices, schemas.ModelPrice{Model: model, InputUSDPerMTok: 0, OutputUSDPerMTok: 0})
		return err
	}
}

// priceCache starts and stops the price table's cache, as every
// coordinator and maker serve keep it.
func priceCache() action {
	return func(ctx context.Context, c *authtest.Conn) error {
		topo, err := openTopo(ctx, c)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cache := pricetable.NewCache(topo.Prices)
		err = cache.Start(cctx)
		cancel()
		cache.Wait()
		return err
	}
}

// TestAuthRefusedService: the service's buckets and stream (quotas, API
// keys, batches, prices) and the api identity of maker serve, on a
// nats-server running the auth.conf `maker auth init` wrote. Only the
// admin makes API keys; only the admin and the api write quotas and
// prices; the coordinator reads them; the voter reaches none of them; the
// api acts for every tenant but never writes a status, report, lease or
// key.
func TestAuthRefusedService(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	ns := bus.DefaultNamespace
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := srv.Connect(t, auth.Coordinator)
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatalf("the coordinator makes the topology: %v (violations %v)", err, c.Violations())
	}
	for _, v := range c.Violations() {
		t.Errorf("coordinator was refused: %v", v)
	}
	keys, quotas, batches, prices := ns.APIKeysBucket(), ns.QuotasBucket(), ns.BatchesBucket(), ns.PricesBucket()
	providers := ns.ProvidersBucket()
	lines := ns.BatchesStream()
	direct := func(bucket string) string { return "$JS.API.DIRECT.GET.KV_" + bucket }
	cases := []refusal{
		// API keys: the admin makes them, the api and the coordinators
		// read them, nobody else reaches them.
		{"admin makes an API key", auth.Admin, keyCreate("alpha"), ""},
		{"api makes an API key", auth.API, keyCreate("alpha"), "$KV." + keys + "."},
		{"coordinator makes an API key", auth.Coordinator, keyCreate("alpha"), "$KV." + keys + "."},
		{"api keeps the key cache", auth.API, keyCache(), ""},
		{"coordinator reads an API key", auth.Coordinator, kvGet(keys, "00ab"), ""},
		{"voter reads an API key", auth.Voter, kvGet(keys, "00ab"), direct(keys)},
		{"approver reads an API key", auth.Approver, kvGet(keys, "00ab"), direct(keys)},
		{"judge reads an API key", auth.Judge, kvGet(keys, "00ab"), "$JS.API.STREAM.INFO.KV_" + keys},
		{"api writes an API key", auth.API, kvPut(keys, "00ab"), "$KV." + keys + ".00ab"},
		{"coordinator purges the API keys", auth.Coordinator, request("$JS.API.STREAM.PURGE.KV_" + keys), "$JS.API.STREAM.PURGE.KV_" + keys},
		{"coordinator deletes the API keys", auth.Coordinator, request("$JS.API.STREAM.DELETE.KV_" + keys), "$JS.API.STREAM.DELETE.KV_" + keys},
		{"api deletes the API keys", auth.API, request("$JS.API.STREAM.DELETE.KV_" + keys), "$JS.API.STREAM.DELETE.KV_" + keys},
		// Quotas: written by the admin and the api (admin keys' route),
		// read live by the coordinators.
		{"admin sets a quota", auth.Admin, kvPut(quotas, "alpha"), ""},
		{"api sets a quota", auth.API, kvPut(quotas, "alpha"), ""},
		{"coordinator watches the quotas", auth.Coordinator, kvWatch(quotas, ">"), ""},
		{"coordinator sets a quota", auth.Coordinator, kvPut(quotas, "alpha"), "$KV." + quotas + ".alpha"},
		{"coordinator purges the quotas", auth.Coordinator, request("$JS.API.STREAM.PURGE.KV_" + quotas), "$JS.API.STREAM.PURGE.KV_" + quotas},
		{"voter reads a quota", auth.Voter, kvGet(quotas, "alpha"), direct(quotas)},
		// Prices: what every tenant's work costs. Written by the admin
		// and the api (admin keys' route), read live by the coordinators
		// and the api; no coordinator, voter, judge or approver
		// writes one (a coordinator pricing its work at 0 would bill
		// nothing).
		{"admin sets a price", auth.Admin, priceSet("sim-1"), ""},
		{"api sets a price", auth.API, priceSet("sim-2"), ""},
		{"coordinator keeps the price cache", auth.Coordinator, priceCache(), ""},
		{"api keeps the price cache", auth.API, priceCache(), ""},
		{"coordinator sets a price", auth.Coordinator, priceSet("sim-1"), "$KV." + prices + ".model.sim-1"},
		{"coordinator purges the prices", auth.Coordinator, request("$JS.API.STREAM.PURGE.KV_" + prices), "$JS.API.STREAM.PURGE.KV_" + prices},
		{"coordinator deletes the prices", auth.Coordinator, request("$JS.API.STREAM.DELETE.KV_" + prices), "$JS.API.STREAM.DELETE.KV_" + prices},
		{"coordinator deletes a price", auth.Coordinator, request("$JS.API.STREAM.MSG.DELETE.KV_" + prices), "$JS.API.STREAM.MSG.DELETE.KV_" + prices},
		{"voter sets a price", auth.Voter, priceSet("sim-1"), "$KV." + prices + ".model.sim-1"},
		{"voter reads a price", auth.Voter, kvGet(prices, "default"), direct(prices)},
		{"approver sets a price", auth.Approver, priceSet("sim-1"), "$KV." + prices + ".model.sim-1"},
		{"judge sets a price", auth.Judge, kvPut(prices, "default"), "$JS.API.STREAM.INFO.KV_" + prices},
		{"api deletes the prices", auth.API, request("$JS.API.STREAM.DELETE.KV_" + prices), "$JS.API.STREAM.DELETE.KV_" + prices},
		// The provider registry: where voters send their provider keys.
		// Only the admin writes it; voters read and watch it. A leaked
		// voter or coordinator credential that could write a deployment
		// would point every voter's key at a server of its choosing.
		{"admin sets a deployment", auth.Admin, kvPut(providers, "openai-east"), ""},
		{"voter reads a deployment", auth.Voter, kvGet(providers, "openai-east"), ""},
		{"voter watches the deployments", auth.Voter, kvWatch(providers, ">"), ""},
		{"voter sets a deployment", auth.Voter, kvPut(providers, "openai-east"), "$KV." + providers + ".openai-east"},
		{"coordinator sets a deployment", auth.Coordinator, kvPut(providers, "openai-east"), "$KV." + providers + ".openai-east"},
		{"coordinator purges the deployments", auth.Coordinator, request("$JS.API.STREAM.PURGE.KV_" + providers), "$JS.API.STREAM.PURGE.KV_" + providers},
		{"voter purges the deployments", auth.Voter, request("$JS.API.STREAM.PURGE.KV_" + providers), "$JS.API.STREAM.PURGE.KV_" + providers},
		{"api sets a deployment", auth.API, kvPut(providers, "openai-east"), "$KV." + providers + ".openai-east"},
		{"judge sets a deployment", auth.Judge, kvPut(providers, "openai-east"), "$JS.API.STREAM.INFO.KV_" + providers},
		// Batches: kept by the api (for the key's tenant) and run by the
		// coordinators.
		{"voter stores a batch line", auth.Voter, publish(ns.BatchSubject("alpha", "b1")), ns.BatchSubject("alpha", "b1")},
		{"voter writes a batch record", auth.Voter, kvPut(batches, "alpha.b1"), "$KV." + batches + ".alpha.b1"},
		{"coordinator writes a batch record", auth.Coordinator, kvPut(batches, "alpha.b2"), ""},
		{"coordinator reads a batch's lines", auth.Coordinator, readLines(lines, ns.BatchSubject("alpha", "b1")), ""},
		{"api stores a batch line", auth.API, jsPublish(ns.BatchSubject("beta", "b1")), ""},
		{"api writes a batch record", auth.API, kvPut(batches, "beta.b1"), ""},
		{"api reads a batch's lines", auth.API, readLines(lines, ns.BatchSubject("alpha", "b1")), ""},
		{"api purges a refused batch's lines", auth.API, purgeSubject(lines, ns.BatchSubject("beta", "b9")), ""},
		// The api acts for every tenant, through the fleet's front doors.
		{"api queues a job", auth.API, jsPublish(ns.JobSubject("beta")), ""},
		{"api asks a control", auth.API, request("maker.v1.control.alpha.j1"), ""},
		{"api asks a decision", auth.API, request("maker.v1.decide.alpha.j1"), ""},
		{"api lists every job", auth.API, jobList(""), ""},
		{"api reads a status", auth.API, kvGet(ns.StatusBucket(), "alpha.j1"), ""},
		{"api reads a report", auth.API, kvGet(ns.ReportsBucket(), "beta.j1"), ""},
		{"api writes a task spec", auth.API, kvPut(ns.TasksBucket(), "t.1"), ""},
		{"api registers a job", auth.API, registerJob("alpha"), ""},
		{"api writes a status", auth.API, kvPut(ns.StatusBucket(), "alpha.j1"), "$KV." + ns.StatusBucket() + ".alpha.j1"},
		{"api writes a report", auth.API, kvPut(ns.ReportsBucket(), "alpha.j1"), "$KV." + ns.ReportsBucket() + ".alpha.j1"},
		{"api reads the leases", auth.API, kvGet(ns.LeasesBucket(), "alpha.j1"), direct(ns.LeasesBucket())},
		{"api publishes a result", auth.API, publish(ns.ResultSubject("alpha", "j1", 0)), ns.ResultSubject("alpha", "j1", 0)},
		{"api publishes step decided", auth.API, publish(ns.DecidedSubject("alpha", "j1")), ns.DecidedSubject("alpha", "j1")},
		{"api issues a sample request", auth.API, publish(ns.SampleSubject("alpha", "j1")), ns.SampleSubject("alpha", "j1")},
		{"api listens to controls", auth.API, subscribe("maker.v1.control.>"), "maker.v1.control.>"},
		{"api listens to another's inbox", auth.API, subscribe("_INBOX.coordinator.>"), "_INBOX.coordinator.>"},
		{"api creates a stream", auth.API, request("$JS.API.STREAM.CREATE.X"), "$JS.API.STREAM.CREATE.X"},
		// The step feed: a job's decisions through filtered ordered reads
		// of the journal, nothing else of it.
		{"api reads a job's decisions", auth.API, readLines(ns.JournalStream(), ns.JournalSubject("alpha", "j1")), ""},
		{"api reads a job's checkpoints", auth.API, readLines(ns.JournalStream(), ns.CheckpointSubject("alpha", "j1")),
			"$JS.API.CONSUMER.CREATE." + ns.JournalStream()},
		{"api reads the whole journal", auth.API, readLines(ns.JournalStream(), "maker.v1.journal.>"),
			"$JS.API.CONSUMER.CREATE." + ns.JournalStream()},
		{"api gets a journal message", auth.API, request("$JS.API.STREAM.MSG.GET." + ns.JournalStream()),
			"$JS.API.STREAM.MSG.GET." + ns.JournalStream()},
	}
	runRefusals(ctx, t, srv, cases)
}

// TestAuthKeysEndToEnd: the admin makes a key, the api's cache (on its own
// identity) authenticates it, and a revoke by the admin reaches the cache.
func TestAuthKeysEndToEnd(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := srv.Connect(t, auth.Admin)
	ajs, err := jetstream.New(admin.Conn)
	if err != nil {
		t.Fatal(err)
	}
	atopo, err := topology.Ensure(ctx, ajs, topology.Config{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	api := srv.Connect(t, auth.API)
	topo, err := openTopo(ctx, api)
	if err != nil {
		t.Fatalf("api binds the topology: %v (violations %v)", err, api.Violations())
	}
	cache := apikey.New(topo)
	if err := cache.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cache.Stop()
	keys := apikey.New(atopo)
	key, rec, err := keys.Create(ctx, apikey.CreateOptions{Tenant: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		p, err := cache.Authenticate(ctx, key)
		if err == nil {
			if p.Tenant != "alpha" || p.KeyID != rec.KeyID {
				t.Fatalf("principal %+v", p)
			}
			break
		}
		if !errors.Is(err, apikey.ErrUnauthorized) || ctx.Err() != nil {
			t.Fatalf("the api's cache never saw the key: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := keys.Revoke(ctx, rec.KeyID); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := cache.Authenticate(ctx, key)
		if errors.Is(err, apikey.ErrUnauthorized) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the revoke never reached the api's cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, v := range append(api.Violations(), admin.Violations()...) {
		t.Errorf("refused: %v", v)
	}
}
