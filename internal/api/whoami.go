package api

import (
	"net/http"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/schemas"
)

// whoami is GET /v1/whoami: what the request's key is (its tenant, admin
// and approver, name and public prefix, never its secret), so a client
// offers only what the key may use. Any valid key may ask about itself.
func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, p apikey.Principal) error {
	return writeJSON(w, http.StatusOK, schemas.Whoami{
		Tenant: p.Tenant, Admin: p.Admin, Approver: p.Approver,
		KeyName: p.Name, KeyPrefix: schemas.APIKeyPrefix + p.KeyID,
	})
}
