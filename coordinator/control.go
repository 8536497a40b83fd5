package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// controlTimeout bounds the registry work of one control or decide
// request: the asker waits for it.
const controlTimeout = 5 * time.Second

// controlService answers people's control and decide requests for the
// namespace's jobs (bus.ControlWildcard, bus.DecideWildcard), and maker
// serve's dead-letter replays (bus.DLQReplaySubject), one of the
// coordinators (queue group bus.QueueCoordinators) each request. The job
// and its tenant are the subject's, never the body's; every request is
// checked against the job's real state by jobs.Apply and jobs.Decide, the
// same checks a client writing the registry itself meets.
type controlService struct {
	c       *Coordinator
	topo    *topology.Topology
	replies *auth.ReplyGuard
	subs    []*nats.Subscription

	mu       sync.Mutex
	stopped  bool
	inflight sync.WaitGroup // the requests being answered
}

// serveControl subscribes the control service. The subscriptions deliver
// to one goroutine each, owned by the NATS connection; stop unsubscribes
// and waits for the requests in hand.
func (c *Coordinator) serveControl(ctx context.Context, topo *topology.Topology) (stop func(), err error) {
	s := &controlService{c: c, topo: topo, replies: auth.NewReplyGuard(c.nc, topo.NS, c.log)}
	for _, subject := range []string{topo.NS.ControlWildcard(), topo.NS.DecideWildcard(), topo.NS.DLQReplaySubject()} {
		sub, err := c.nc.QueueSubscribe(subject, bus.QueueCoordinators, func(m *nats.Msg) { s.handle(ctx, m) })
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("coordinator: subscribe to %s: %w", subject, err)
		}
		s.subs = append(s.subs, sub)
	}
	// The server has the interest before any request is counted on it.
	if err := c.nc.Flush(); err != nil {
		s.stop()
		return nil, fmt.Errorf("coordinator: control service: %w", err)
	}
	return s.stop, nil
}

// stop ends the subscriptions and waits for the requests in hand. A
// request delivered after it is not answered: its asker times out or, more
// likely, another coordinator answers it.
func (s *controlService) stop() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.inflight.Wait()
}

// handle answers one request. A request that cannot be answered (no reply
// subject) is logged and dropped.
func (s *controlService) handle(ctx context.Context, m *nats.Msg) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	defer s.inflight.Done()
	if !s.replies.Allow(m) {
		// Answered anywhere else, the reply would be the coordinator's
		// own publish where the requester may not publish (see
		// bus.InboxReply), or go to another identity's inbox than the
		// sender's (auth.CheckReply): refused before anything is done,
		// counted and logged at most once a second.
		return
	}
	if m.Subject == s.topo.NS.DLQReplaySubject() {
		s.replay(ctx, m) // dlqreplay.go
		return
	}
	kind, tenant, job, ok := s.topo.NS.ParseControlSubject(m.Subject)
	log := s.c.log.With("subject", m.Subject)
	var (
		out jobs.Outcome
		err error
	)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlTimeout)
	defer cancel()
	switch {
	case !ok:
		err = fmt.Errorf("%w: %q is not a control or decide subject", jobs.ErrInvalid, m.Subject)
	case kind == bus.RequestControl:
		out, err = s.control(rctx, tenant, job, m.Data)
	default:
		out, err = s.decide(rctx, tenant, job, m.Data, log)
	}
	rep := jobs.Reply(tenant, job, out, err)
	switch {
	case errors.Is(err, jobs.ErrNotWaiting):
		// A decision for a step that does not wait for a person: a
		// mistake, a replay or a forgery. Refused and logged.
		log.Warn("person's decision refused", "tenant", tenant, "job", job, "err", err)
	case err != nil:
		log.Info("control request refused", "tenant", tenant, "job", job, "err", err)
	case out.Changed:
		log.Info("control request applied", "tenant", tenant, "job", job, "control", out.Record.Control)
	}
	data, err := schemas.Encode(rep)
	if err != nil {
		log.Error("encode control reply", "err", err)
		return
	}
	if err := m.Respond(data); err != nil {
		log.Warn("send control reply", "err", err)
	}
}

func (s *controlService) control(ctx context.Context, tenant, job string, data []byte) (jobs.Outcome, error) {
	var req schemas.ControlRequest
	if err := schemas.Decode(data, &req); err != nil {
		return jobs.Outcome{}, fmt.Errorf("%w: %w", jobs.ErrInvalid, err)
	}
	return jobs.Apply(ctx, s.topo, tenant, job, req)
}

func (s *controlService) decide(ctx context.Context, tenant, job string, data []byte, log *slog.Logger) (jobs.Outcome, error) {
	var req schemas.DecideRequest
	if err := schemas.Decode(data, &req); err != nil {
		return jobs.Outcome{}, fmt.Errorf("%w: %w", jobs.ErrInvalid, err)
	}
	rec, err := jobs.Decide(ctx, s.topo, tenant, job, req.Decision())
	if err != nil {
		return jobs.Outcome{}, err
	}
	log.Warn("a person's decision recorded", "tenant", tenant, "job", job, "step", req.Step, "by", req.By)
	return jobs.Outcome{Record: rec, Changed: true}, nil
}
