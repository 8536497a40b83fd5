// Package httpapi is the Go client of the makerfleet HTTP API, the one
// `maker serve` answers (docs/api.md, /openapi.json): jobs (submit, get,
// list, result, pause, resume, cancel, decide, and their progress as
// Server-Sent Events), batches (submit a JSONL input, status, cancel, the
// output and error files streamed) and the tenant's usage. Request and
// response bodies are the types of package schemas (schemas/api.go).
//
// Every request carries the API key as "Authorization: Bearer KEY" and
// acts as the key's tenant. An error answer (RFC 9457 problem details) is
// returned as a *ProblemError holding the problem; errors.Is matches it
// against the sentinels in errors.go by its type (ErrNotFound for another
// tenant's id too, ErrInvalid with the failing fields for a 422, ...).
//
// For programs that reach the fleet's NATS server directly, package
// client does the same without an API server in between.
package httpapi
