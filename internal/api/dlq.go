package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/bus"
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

// replayDeadLetters is POST /v1/dlq/replay (admin keys only): each dead
// letter named is replayed by bus.ReplayDeadLetters, the one replay maker
// dlq replay runs too, so the API refuses exactly what the CLI refuses
// (bus.CheckReplay: a dead letter replays only as a sample request of the
// job its DLQ subject names), each refusal with why, and a refusal or a
// failure stops none of the others.
func (s *Server) replayDeadLetters(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	var body schemas.DLQReplayBody
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &body); err != nil {
		return err
	}
	if len(body.Seqs) == 0 || len(body.Seqs) > schemas.MaxReplaySeqs {
		return invalidField("/seqs", "seqs must name 1 to %d dead letters (their dlq_seq), not %d", schemas.MaxReplaySeqs, len(body.Seqs))
	}
	seen := make(map[uint64]bool, len(body.Seqs))
	for i, seq := range body.Seqs {
		if seq == 0 {
			return invalidField(fmt.Sprintf("/seqs/%d", i), "a dead letter's sequence is at least 1")
		}
		if seen[seq] {
			return invalidField(fmt.Sprintf("/seqs/%d", i), "dead letter %d is named twice", seq)
		}
		seen[seq] = true
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	out := bus.ReplayDeadLetters(ctx, s.deps.Topo.JS, s.deps.Topo.NS, body.Seqs)
	res := schemas.DLQReplayResult{Replayed: out.Replayed, Refused: out.Refused, Failed: []schemas.DLQReplayProblem{}}
	if res.Replayed == nil {
		res.Replayed = []schemas.StoredDeadLetter{}
	}
	if res.Refused == nil {
		res.Refused = []schemas.DLQReplayProblem{}
	}
	for _, f := range out.Failed {
		res.Failed = append(res.Failed, schemas.DLQReplayProblem{Seq: f.Seq, Reason: f.Err.Error()})
	}
	s.log.Info("dead letters replayed through the API", "key", p.Person(), "replayed", len(res.Replayed),
		"refused", len(res.Refused), "failed", len(res.Failed))
	return writeJSON(w, http.StatusOK, res)
}
