package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/presence"
)

// getFleet answers GET /v1/fleet (admin keys): the fleet view, read now
// from the presence bucket and the work queues' JetStream info
// (presence.View). The records are their writers' claims: shown, never
// acted on.
func (s *Server) getFleet(w http.ResponseWriter, r *http.Request, _ apikey.Principal) error {
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	v, err := presence.View(ctx, s.deps.Topo.JS, s.deps.Topo.NS, time.Now())
	if err != nil {
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	return writeJSON(w, http.StatusOK, v)
}
