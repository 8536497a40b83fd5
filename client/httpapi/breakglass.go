package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// BreakGlass asks the judges' panel as the key's tenant (POST
// /v1/breakglass): req's tenant and requester are left out, the server
// takes both from the key. It returns once the request is queued; read
// the answer with BreakGlassAnswer or WaitBreakGlass.
func (c *Client) BreakGlass(ctx context.Context, req schemas.BreakGlassRequest) (schemas.BreakGlassAccepted, error) {
	var out schemas.BreakGlassAccepted
	return out, c.doJSON(ctx, http.MethodPost, "/v1/breakglass", nil, req, &out)
}

// BreakGlassAnswer returns the stored answer to the tenant's request id,
// held or final, waiting up to wait (at most a minute) for a final one.
// ErrNotFound while there is none (not answered yet, or never asked).
func (c *Client) BreakGlassAnswer(ctx context.Context, id string, wait time.Duration) (schemas.BreakGlassResponse, error) {
	q := url.Values{}
	if s := int(wait / time.Second); s > 0 {
		q.Set("wait", strconv.Itoa(min(s, 60)))
	}
	var out schemas.BreakGlassResponse
	return out, c.doJSON(ctx, http.MethodGet, "/v1/breakglass/"+url.PathEscape(id), q, nil, &out)
}

// Waits of WaitBreakGlass's requests: short until an answer is stored, so
// that a held one is heard of soon after the judge holds it (a final one
// comes back at once either way); long once held (a person's approval
// takes minutes).
const (
	unansweredWait = 5 * time.Second
	heldWait       = 30 * time.Second
)

// WaitBreakGlass waits until ctx ends for the final answer to the
// tenant's request id; onHeld (optional) hears of the first held answer
// (the request waits for a person's approval).
func (c *Client) WaitBreakGlass(ctx context.Context, id string, onHeld func(schemas.BreakGlassResponse)) (schemas.BreakGlassResponse, error) {
	held := false
	for {
		wait := unansweredWait
		if held {
			wait = heldWait
		}
		r, err := c.BreakGlassAnswer(ctx, id, wait)
		switch {
		case err == nil && schemas.FinalBreakGlassOutcome(r.Outcome):
			return r, nil
		case err == nil:
			if !held && onHeld != nil {
				onHeld(r)
			}
			held = true
		case !errors.Is(err, ErrNotFound):
			return schemas.BreakGlassResponse{}, err
		}
		if err := ctx.Err(); err != nil {
			return schemas.BreakGlassResponse{}, err
		}
	}
}
