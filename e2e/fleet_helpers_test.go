package e2e

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// services are the real NATS and Redis a fleet test runs on, and the
// test's own NATS connection for watching the fleet.
type services struct {
	natsURL  string
	redisURL string
	nc       *nats.Conn
	js       jetstream.JetStream
}

// startServices starts an in-process nats-server and, if withRedis, a
// redis-server (MAKER_REQUIRE_REDIS=1 forbids the miniredis fallback).
func startServices(t *testing.T, withRedis bool) *services {
	t.Helper()
	ns := testkit.StartNATS(t)
	s := &services{natsURL: ns.URL}
	if withRedis {
		r := testkit.StartRedis(t)
		if r.Kind != "redis-server" {
			t.Logf("fleet runs on %s, not redis-server", r.Kind)
		}
		s.redisURL = r.URL()
	}
	nc, err := nats.Connect(ns.URL, nats.Name("e2e-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s.nc = nc
	s.js, err = jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *services) startCoordinator(t *testing.T, name string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"coordinator", "--nats", s.natsURL, "--redis", s.redisURL, "--id", name}, extra...)
	return startProc(t, name, args...)
}

func (s *services) startVoter(t *testing.T, name, modelURL string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"voter", "--nats", s.natsURL, "--llm-base-url", modelURL, "--model", "sim-1", "--id", name}, extra...)
	return startProc(t, name, args...)
}

// waitWaiting waits until a shared consumer has at least n pull requests
// waiting: the coordinators', or the voters' once every voter pulls.
func (s *services) waitWaiting(t *testing.T, stream, consumer string, n int, watch ...*proc) {
	t.Helper()
	waitFor(t, 20*time.Second, consumer+" pulling", func() bool {
		ctx, cancel := opCtx()
		defer cancel()
		c, err := s.js.Consumer(ctx, stream, consumer)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumWaiting >= n
	}, watch...)
}

// waitFleet waits until the coordinator and every voter are pulling work.
func (s *services) waitFleet(t *testing.T, coord *proc, voters ...*proc) {
	t.Helper()
	all := append([]*proc{coord}, voters...)
	s.waitWaiting(t, bus.DefaultNamespace.JobsStream(), bus.ConsumerCoordinators, 1, all...)
	s.waitWaiting(t, bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters, len(voters), all...)
}

// status reads a job's progress from the status bucket; ok is false while
// there is none.
func (s *services) status(t *testing.T, jobID string) (schemas.JobStatus, bool) {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	kv, err := s.js.KeyValue(ctx, bus.DefaultNamespace.StatusBucket())
	if err != nil {
		return schemas.JobStatus{}, false
	}
	e, err := kv.Get(ctx, bus.JobKey(schemas.DefaultTenant, jobID))
	if err != nil {
		return schemas.JobStatus{}, false
	}
	var st schemas.JobStatus
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		t.Fatalf("status of %s: %v", jobID, err)
	}
	return st, true
}

// jobMessages is the number of messages in the job stream; -1 when the
// stream does not exist.
func (s *services) jobMessages(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	st, err := s.js.Stream(ctx, bus.DefaultNamespace.JobsStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return -1
	}
	if err != nil {
		t.Fatalf("job stream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("job stream: %v", err)
	}
	return int64(info.State.Msgs)
}
