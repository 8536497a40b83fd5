package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// maxAnswerWait bounds GET /v1/breakglass/{id}?wait=.
const maxAnswerWait = 60 * time.Second

// judgeErr is the problem of a judge client error.
func judgeErr(err error) error {
	switch {
	case errors.Is(err, topology.ErrNoJudge):
		return problem(TypeUnavailable, "no judge serves this fleet (its topology is missing): ask the operator to start maker judge")
	case errors.Is(err, judgeclient.ErrNoAnswer):
		return problem(TypeNotFound, "no answer yet: the judges have not answered this request of your tenant (it may still be queued), or there is no such request")
	case errors.Is(err, schemas.ErrInvalid):
		return invalidField("", "%s", detailOf(err))
	case bus.LimitReached(err):
		pe := problem(TypeRateLimited, "your tenant has as many break-glass requests waiting for a judge as it may; try again once they are answered")
		pe.retryAfter = 30
		return pe
	}
	return err
}

// postBreakGlass is POST /v1/breakglass: a break-glass request for the
// judges' panel, asked as the key's tenant and by the key's holder. The
// tenant and the requester come from the key: a body naming others is
// refused, never believed.
func (s *Server) postBreakGlass(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	var req schemas.BreakGlassRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	if req.Tenant != "" && req.Tenant != p.Tenant {
		return invalidField("/tenant", "tenant %q is not the API key's tenant; leave it out", req.Tenant)
	}
	if req.Requester != "" && req.Requester != p.Person() {
		return invalidField("/requester", "the requester is the API key's name (%q); leave it out", p.Person())
	}
	req.Tenant, req.Requester = p.Tenant, p.Person()
	if req.RequestID == "" {
		req.RequestID = judgeclient.NewRequestID("bg")
	}
	if req.Session == "" {
		req.Session = "default"
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	if err := judgeclient.Post(ctx, s.deps.Topo.JS, s.deps.Topo.NS, &req); err != nil {
		return judgeErr(err)
	}
	w.Header().Set("Location", "/v1/breakglass/"+url.PathEscape(req.RequestID))
	return writeJSON(w, http.StatusAccepted, schemas.BreakGlassAccepted{RequestID: req.RequestID, Tenant: req.Tenant, Requester: req.Requester})
}

// getBreakGlass is GET /v1/breakglass/{id}: the answer to one of the
// tenant's break-glass requests, held or final; ?wait=S waits up to S
// seconds for a final one.
func (s *Server) getBreakGlass(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	id := r.PathValue("id")
	if schemas.ValidJobID(id) != nil {
		return problem(TypeNotFound, "no such request")
	}
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || time.Duration(n)*time.Second > maxAnswerWait {
			return problem(TypeBadRequest, "wait %q must be whole seconds from 0 to %d", v, int(maxAnswerWait/time.Second))
		}
		wait = time.Duration(n) * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout+wait)
	defer cancel()
	resp, err := judgeclient.Await(ctx, s.deps.Topo.JS, s.deps.Topo.NS, p.Tenant, id, wait)
	if err != nil {
		return judgeErr(err)
	}
	return writeJSON(w, http.StatusOK, resp)
}
