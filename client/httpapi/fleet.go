package httpapi

import (
	"context"
	"net/http"

	"github.com/makerfleet/makerfleet/schemas"
)

// Fleet reads the fleet view (GET /v1/fleet): admin keys only, any other
// is refused (403).
func (c *Client) Fleet(ctx context.Context) (schemas.FleetView, error) {
	var v schemas.FleetView
	err := c.doJSON(ctx, http.MethodGet, "/v1/fleet", nil, nil, &v)
	return v, err
}
