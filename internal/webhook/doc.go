// Package webhook delivers the ends of jobs and batches to the URLs their
// submitters named: signed, retried with backoff, every attempt recorded.
//
// Whoever ends a job or a batch (a coordinator, a batch runner, the API
// for a batch that ends at once) calls Publish with the task JobTask or
// BatchTask builds: one schemas.WebhookTask on the webhook stream, its
// delivery id the Msg-Id, so a repeated end queues it once. Every `maker
// serve` runs a Deliverer on the stream's one durable consumer, so each
// task is in one server's hands at a time, and a task queued while no
// server runs waits for one. The Deliverer POSTs the event signed with
// the tenant's key (the Standard Webhooks scheme: Sign), acks on a 2xx,
// and otherwise hands the task back with a delay that doubles from
// Config.InitialBackoff up to Config.MaxBackoff, until Config.MaxAttempts;
// each attempt is recorded in the delivery's schemas.WebhookDelivery
// record (the webhooks bucket, <tenant>.<delivery id>), which the API
// shows. A record already delivered or failed is never POSTed again.
//
// Where a delivery may go is checked when it is dialled (Guard): the
// address the name resolves to, so a name that resolves elsewhere the
// second time is caught too. Loopback, private, link-local (the cloud
// metadata address among them), CGNAT, multicast, unspecified addresses
// and the fleet's own listen addresses are refused unless the operator
// allows them; redirects are not followed.
//
// Tenants' keys are derived from one master secret (TenantKey): a tenant
// reads its own (whsec_...) through the API, never another's.
//
// Subjects, buckets and kinds:
//
//	stream <NS>_WEBHOOKS  <ns>.v1.webhook.<tenant>.<delivery id>  schemas.WebhookTask (work queue;
//	                                                             durable consumer "webhooks")
//	KV <ns>_webhooks      <tenant>.<delivery id>                  schemas.WebhookDelivery
//	                      _secret.master                          the generated master secret, when the
//	                                                              operator gives none
package webhook
