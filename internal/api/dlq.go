package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

// Dead letters a listing returns when ?limit= is not given, and at most.
const (
	dlqListLimit    = 100
	dlqMaxListLimit = 1000
)

// listDeadLetters is GET /v1/dlq: the key's tenant's dead letters (an
// admin key's ?tenant=: another tenant's, or "*" every tenant's), oldest
// first. Replaying them is the operator's: maker dlq replay, or an admin
// key's POST /v1/dlq/replay.
func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	tenant, err := actingTenant(r, p)
	if err != nil {
		return err
	}
	if tenant == "*" {
		tenant = ""
	}
	q := r.URL.Query()
	job := q.Get("job")
	if job != "" && schemas.ValidJobID(job) != nil {
		return problem(TypeBadRequest, "job %q is not a job id (%s)", job, schemas.JobIDRule)
	}
	limit := dlqListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > dlqMaxListLimit {
			return problem(TypeBadRequest, "limit %q must be an integer from 1 to %d", v, dlqMaxListLimit)
		}
		limit = n
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	dls, err := bus.ListDeadLetters(ctx, s.deps.Topo.JS, s.deps.Topo.NS, tenant, job, limit)
	if err != nil {
		return err
	}
	if dls == nil {
		dls = []schemas.StoredDeadLetter{}
	}
	return writeJSON(w, http.StatusOK, schemas.DeadLetterList{DeadLetters: dls})
}

// replayDeadLetters is POST /v1/dlq/replay (admin keys only): the
// coordinators replay the dead letters named (bus.DLQReplaySubject: a
// replay publishes sample requests, which only they may), each with
// bus.ReplayDeadLetters, the one replay maker dlq replay runs too, so the
// API refuses exactly what the CLI refuses (bus.CheckReplay: a dead letter
// replays only as a sample request of the job its DLQ subject names), each
// refusal with why, and a refusal or a failure stops none of the others.
// With no coordinator running, the server replays them itself (as a
// control falls back to the registry), except on a secured fleet, where
// its api identity may not: 503 then.
func (s *Server) replayDeadLetters(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	var body schemas.DLQReplayBody
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &body); err != nil {
		return err
	}
	if field, err := body.Check(); err != nil {
		return invalidField(field, "%s", err)
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	req, err := json.Marshal(body)
	if err != nil {
		return err
	}
	var res schemas.DLQReplayResult
	msg, err := s.deps.NC.RequestWithContext(ctx, s.deps.Topo.NS.DLQReplaySubject(), req)
	switch {
	case errors.Is(err, nats.ErrNoResponders) && auth.ConnSecured(s.deps.NC):
		return fmt.Errorf("%w: no coordinator runs to replay dead letters (this server's identity may not issue sample requests)",
			jobs.ErrUnavailable)
	case errors.Is(err, nats.ErrNoResponders):
		res = bus.ReplayDeadLetters(ctx, s.deps.Topo.JS, s.deps.Topo.NS, body.Seqs).Result()
	case err != nil:
		return fmt.Errorf("%w: ask the coordinators to replay: %w", jobs.ErrUnavailable, err)
	default:
		if err := json.Unmarshal(msg.Data, &res); err != nil {
			return fmt.Errorf("%w: the coordinators' replay answer: %w", jobs.ErrUnavailable, err)
		}
	}
	s.log.Info("dead letters replayed through the API", "key", p.Person(), "replayed", len(res.Replayed),
		"refused", len(res.Refused), "failed", len(res.Failed))
	return writeJSON(w, http.StatusOK, res)
}
