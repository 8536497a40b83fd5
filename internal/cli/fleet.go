package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/voter"
)

// fleetOptions say which services an in-process fleet uses: external ones
// when their URL is set, embedded ones otherwise.
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
	bus         bus.Config
	log         *slog.Logger
}

// fleet is a whole MAKER fleet in this process: coordinator and voter, on
// embedded or external NATS, Redis and model.
type fleet struct {
	bus       bus.Config // the namespace is private to this fleet
	nc        *nats.Conn
	js        jetstream.JetStream
	topo      *bus.Topology
	voter     *voter.Voter
	redisKind string
	modelURL  string

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errs    chan error
	closers []func() // run in reverse order by close
}

// startFleet brings the services up, then the coordinator and the voter.
// On error everything started so far is stopped again.
func startFleet(ctx context.Context, o fleetOptions) (_ *fleet, err error) {
	// A namespace of its own, for NATS and Redis alike: on a shared server
	// this fleet's coordinator and voter must take no other fleet's jobs
	// or samples, nor anyone else theirs.
	if o.bus.Namespace == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.bus.Namespace = bus.Namespace("run-" + hex.EncodeToString(b[:]))
	}
	f := &fleet{bus: o.bus, errs: make(chan error, 2)}
	defer func() {
		if err != nil {
			f.close()
		}
	}()

	natsURL := o.natsURL
	if natsURL == "" {
		dir := o.dataDir
		if dir == "" {
			// A throwaway store: in memory (tmpfs) when the machine has
			// one, which spares the file store's create/unlink per
			// emptied block on a real disk.
			scratch := scratchDir()
			removeStaleStores(scratch)
			dir, err = os.MkdirTemp(scratch, fmt.Sprintf("maker-nats-%d-", os.Getpid()))
			if err != nil {
				return nil, err
			}
			f.closers = append(f.closers, func() { _ = os.RemoveAll(dir) })
		}
		ns, err := bus.RunEmbedded(bus.EmbeddedOptions{StoreDir: dir})
		if err != nil {
			return nil, err
		}
		f.closers = append(f.closers, func() { ns.Shutdown(); ns.WaitForShutdown() })
		natsURL = clientURL(ns)
	}

	redisURL := o.redisURL
	switch {
	case redisURL != "":
		f.redisKind = "external"
	case o.redisServer:
		p, err := store.StartServer(ctx)
		if err == nil {
			f.closers = append(f.closers, p.Close)
			redisURL, f.redisKind = "redis://"+p.Addr, "redis-server"
			break
		}
		o.log.Warn("no redis-server to start; using embedded miniredis", "err", err)
		fallthrough
	default:
		m, err := store.RunEmbedded()
		if err != nil {
			return nil, err
		}
		f.closers = append(f.closers, m.Close)
		redisURL, f.redisKind = "redis://"+m.Addr(), "miniredis"
	}
	ropts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, usagef("--redis %q: %v", redisURL, err)
	}
	rdb := redis.NewClient(ropts)
	f.closers = append(f.closers, func() { _ = rdb.Close() })
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s: %w", redisURL, err)
	}

	f.modelURL = o.llmBaseURL
	var modelHTTP *http.Client
	switch {
	case f.modelURL != "":
	case o.simHTTP:
		sim, err := simllm.Start(ctx, "127.0.0.1:0", o.sim)
		if err != nil {
			return nil, err
		}
		f.closers = append(f.closers, func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = sim.Close(cctx)
		})
		f.modelURL = sim.URL()
	default:
		// The simulated model in this process, reached through the same
		// go-openai client but in memory rather than over a socket.
		sim, err := simllm.New(o.sim)
		if err != nil {
			return nil, usageError{err}
		}
		f.modelURL = "http://simllm.in-process/v1"
		modelHTTP = &http.Client{Transport: sim.Transport()}
	}
	model := o.model
	if model == "" {
		model = simllm.DefaultModel
	}
	client, err := llm.New(llm.Config{BaseURL: f.modelURL, APIKey: o.apiKey, Model: model, HTTPClient: modelHTTP})
	if err != nil {
		return nil, usageError{err}
	}
	f.closers = append(f.closers, client.Close)

	f.nc, err = bus.Connect(natsURL, "maker-run")
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, func() { _ = f.nc.Drain() })
	if o.natsURL != "" {
		f.closers = append(f.closers, func() {
			if f.js == nil {
				return
			}
			tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := bus.Teardown(tctx, f.js, o.bus.Namespace); err != nil {
				o.log.Warn("remove this run's streams", "namespace", o.bus.Namespace, "err", err)
			}
		})
	}
	f.js, err = jetstream.New(f.nc)
	if err != nil {
		return nil, err
	}
	f.topo, err = bus.Ensure(ctx, f.js, o.bus)
	if err != nil {
		return nil, err
	}

	tasks := builtin.Registry()
	st, err := store.New(rdb, store.Config{KeyPrefix: o.bus.Namespace.String()})
	if err != nil {
		return nil, err
	}
	coord, err := coordinator.New(f.nc, st, coordinator.Config{ID: "coordinator-inproc", Tasks: tasks, Bus: o.bus, Logger: o.log})
	if err != nil {
		return nil, err
	}
	f.voter, err = voter.New(f.nc, client, voter.Config{
		ID: "voter-inproc", Tasks: tasks, Model: model, Concurrency: o.concurrency, Bus: o.bus, Logger: o.log,
		DrainTimeout: 2 * time.Second,
	})
	if err != nil {
		return nil, usageError{err}
	}
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	f.cancel = cancelRun
	for _, role := range []func(context.Context) error{coord.Run, f.voter.Run} {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := role(runCtx); err != nil {
				f.errs <- err
			}
		}()
	}
	return f, nil
}

// failed returns a role's error once one has stopped with one.
func (f *fleet) failed() <-chan error { return f.errs }

// close stops the roles, then the services, in reverse order of start.
func (f *fleet) close() {
	if f.cancel != nil {
		f.cancel()
		f.wg.Wait()
	}
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
	f.closers = nil
}

func clientURL(ns *server.Server) string { return ns.ClientURL() }

// removeStaleStores removes the throwaway stores of runs that died without
// cleaning up (killed with SIGKILL, say): maker-nats-<pid>-* whose process
// is gone. On tmpfs they would hold memory until reboot.
func removeStaleStores(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "maker-nats-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.Signal(0)) == nil {
			continue // its run is still going
		}
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// scratchDir is where a temporary embedded store goes: /dev/shm when it is
// a writable directory, else the system temp dir.
func scratchDir() string {
	const shm = "/dev/shm"
	if fi, err := os.Stat(shm); err == nil && fi.IsDir() {
		if f, err := os.CreateTemp(shm, "maker-probe-"); err == nil {
			name := f.Name()
			_ = f.Close()
			_ = os.Remove(name)
			return shm
		}
	}
	return os.TempDir()
}

// errFleet wraps a role failure.
var errFleet = errors.New("fleet role stopped")
