package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/client"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/topology"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// The connections commands make: to NATS (a JetStream context, the
// fleet's bound topology, the public client) and to Redis, each bounded
// in time and creating nothing on the server.

// natsAuth returns the --nats-* flags of the running command, for
// bus.Connect.
func natsAuth(ctx context.Context) bus.Auth { return bus.AuthFromContext(ctx) }

// connName is a role's NATS connection name, maker-<role>-<id>: its id
// (without a leading "<role>-"), or host-pid when it has none.
func connName(role, id string) string {
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return "maker-" + role + "-" + strings.TrimPrefix(id, role+"-")
}

// connectJS connects to NATS for a short admin command.
func connectJS(natsURL, name string, opts ...bus.ConnOption) (jetstream.JetStream, func(), error) {
	nc, err := bus.Connect(natsURL, name, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// fleetConn is a connection to a running fleet and its topology, for
// the operators' commands (dlq); the job commands use the public client
// (dialClient).
type fleetConn struct {
	nc   *nats.Conn
	topo *topology.Topology
}

func (f *fleetConn) Close() { f.nc.Close() }

// dialFleet connects to the fleet at natsURL, within a bounded time: a
// client command must not hang on a server that does not answer. It binds
// the fleet's topology without creating it: a client command run against
// the wrong server must not leave a fleet's streams on it.
func dialFleet(ctx context.Context, natsURL, name string) (*fleetConn, error) {
	nc, err := bus.Connect(natsURL, name, natsAuth(ctx))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	topo, err := topology.Open(ctx, js, topology.Config{StartupWait: 10 * time.Second})
	if err != nil {
		nc.Close()
		if errors.Is(err, topology.ErrNoFleet) {
			return nil, fmt.Errorf("%s: %w", bus.RedactURL(natsURL), err)
		}
		return nil, err
	}
	return &fleetConn{nc: nc, topo: topo}, nil
}

// dialClient connects to the fleet at natsURL as dialFleet does (bounded,
// creating nothing) and returns the public client on it, in tenant.
func dialClient(ctx context.Context, natsURL, name, tenant string) (*natsClient, error) {
	n, err := connectClient(ctx, natsURL, name, tenant)
	if err != nil {
		return nil, err
	}
	if err := n.c.CheckFleet(ctx); err != nil {
		n.Close()
		if errors.Is(err, client.ErrNoFleet) {
			return nil, fmt.Errorf("%s: %w", bus.RedactURL(natsURL), err)
		}
		return nil, err
	}
	return n, nil
}

// connectClient is dialClient without the check that a fleet is there:
// a job submitted to a server with no fleet yet waits there for one.
func connectClient(ctx context.Context, natsURL, name, tenant string) (*natsClient, error) {
	nc, err := bus.Connect(natsURL, name, natsAuth(ctx))
	if err != nil {
		return nil, err
	}
	c, err := client.New(nc, client.WithTenant(tenant), client.WithTaskSpecs(taskspec.CompileSpec))
	if err != nil {
		nc.Close()
		return nil, usageError{err}
	}
	return &natsClient{c: c, nc: nc}, nil
}

// dialRedis connects to the fleet's Redis at url (a --redis) and checks
// that it answers: one clear error naming the server (redacted), before
// anything starts.
func dialRedis(ctx context.Context, url string) (redis.UniversalClient, error) {
	rdb, ropts, err := store.NewRedisClient(url)
	if err != nil {
		return nil, usagef("--redis: %v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at %s: %w", ropts.Redacted, err)
	}
	return rdb, nil
}
