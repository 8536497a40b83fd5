package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/webhook"
	"github.com/makerfleet/makerfleet/schemas"
)

// Deliveries a listing returns when ?limit= is not given, and at most.
const (
	webhookListLimit    = 100
	webhookMaxListLimit = 1000
)

// webhookRoutes are the webhook routes: a tenant's signing secret and its
// deliveries (a job's or batch's own shows in its view).
func (s *Server) webhookRoutes() []route {
	return []route{
		{method: http.MethodGet, path: "/v1/webhooks/secret", access: tenant, h: s.webhookSecret, id: "getWebhookSecret",
			summary: "The key's tenant's webhook signing secret (whsec_...): verify each delivery's webhook-signature with it",
			desc: "Deliveries are signed by the Standard Webhooks scheme: webhook-signature is v1,<base64 HMAC-SHA256(key, " +
				"\"<webhook-id>.<webhook-timestamp>.<body>\")>, key the base64 after whsec_. Each tenant has its own secret; " +
				"a key reads only its own tenant's.",
			ok: http.StatusOK, okBody: jsonOf[schemas.WebhookSecret](), errs: []int{501}},
		{method: http.MethodGet, path: "/v1/webhooks/deliveries", access: tenant, h: s.webhookDeliveries, id: "listWebhookDeliveries",
			summary: "The key's tenant's webhook deliveries, newest first: state and every attempt",
			query:   []param{{"limit", "most deliveries (default 100, at most 1000)", "integer"}},
			ok:      http.StatusOK, okBody: jsonOf[schemas.WebhookDeliveryList](), errs: []int{400}},
	}
}

// webhookSecret is GET /v1/webhooks/secret: always the key's own tenant's.
func (s *Server) webhookSecret(w http.ResponseWriter, _ *http.Request, p apikey.Principal) error {
	if s.deps.WebhookSecret == nil {
		return problem(TypeNotImplemented, "webhooks are not delivered by this server")
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusOK, schemas.WebhookSecret{Tenant: p.Tenant, Secret: s.deps.WebhookSecret(p.Tenant)})
}

// webhookDeliveries is GET /v1/webhooks/deliveries.
func (s *Server) webhookDeliveries(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	limit := webhookListLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > webhookMaxListLimit {
			return problem(TypeBadRequest, "limit %q must be an integer from 1 to %d", v, webhookMaxListLimit)
		}
		limit = n
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	out := []schemas.WebhookDelivery{}
	if kv := s.deps.Topo.Webhooks; kv != nil {
		var err error
		if out, err = webhook.List(ctx, kv, p.Tenant, limit); err != nil {
			return err
		}
	}
	return writeJSON(w, http.StatusOK, schemas.WebhookDeliveryList{Deliveries: out})
}

// checkWebhook refuses a webhook URL that is not one, as a field error
// at path.
func checkWebhook(path, url string) error {
	if url == "" {
		return nil
	}
	if err := schemas.ValidWebhookURL(url); err != nil {
		return invalidField(path, "%s", strings.TrimPrefix(err.Error(), schemas.ErrInvalid.Error()+": "))
	}
	return nil
}

// jobWebhook is the webhook of rec's job as its view shows it (nil when
// it names none).
func (s *Server) jobWebhook(ctx context.Context, rec schemas.JobRecord) (*schemas.WebhookView, error) {
	sp := rec.Spec
	if sp.Webhook == "" {
		return nil, nil
	}
	return webhook.View(ctx, s.deps.Topo.Webhooks, rec.Tenant, schemas.WebhookJobDeliveryID(sp.JobID, sp.SubmittedAt), sp.Webhook)
}

// batchWebhook fills rec's webhook delivery, when it names a webhook.
func (s *Server) batchWebhook(ctx context.Context, rec *schemas.BatchRecord) error {
	if rec.Webhook == "" {
		return nil
	}
	v, err := webhook.View(ctx, s.deps.Topo.Webhooks, rec.Tenant, schemas.WebhookBatchDeliveryID(rec.ID), rec.Webhook)
	rec.WebhookDelivery = v
	return err
}
