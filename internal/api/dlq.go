package api

import (
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
// first. Replaying them stays the operator's (maker dlq replay).
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
