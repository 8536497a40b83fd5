package api

import (
	"net/http"
	"reflect"

	"github.com/makerfleet/makerfleet/schemas"
)

// route is one endpoint: its handler and what the OpenAPI document says of
// it. Routes are registered and documented from the one table, so every
// route is documented.
type route struct {
	method, path string
	access       access
	h            handler
	// id is the operationId; summary one line; desc more (optional).
	id, summary, desc string
	// query are the query parameters.
	query []param
	// body is the request body (nil: none); longBody gives its read
	// Config.BatchReadTimeout instead of RequestTimeout.
	body     *content
	longBody bool
	// ok is the success status and its body (nil: none); also a second
	// success status with the same body (0: none), e.g. 200 for a request
	// already done.
	ok, also int
	okBody   *content
	// errs are the problem statuses this route answers besides those every
	// route may (400 for a query string that does not parse; 401, 429, 500,
	// 503 for keyed routes; 400 for a route taking ?tenant=).
	errs []int
}

// param is a query parameter.
type param struct {
	name, desc string
	// typ is its JSON Schema type: string or integer.
	typ string
}

// content is a body: its media types and schema (a schemas type, or a
// string when typ is nil).
type content struct {
	types []string
	typ   reflect.Type
	// desc describes the body.
	desc string
}

func jsonOf[T any]() *content {
	return &content{types: []string{"application/json"}, typ: reflect.TypeFor[T]()}
}

// jsonl is a JSON Lines body.
var jsonlTypes = []string{"application/jsonl", "application/x-ndjson"}

func (s *Server) routes() []route {
	jobID := "the job's id within the key's tenant"
	tenantQ := param{"tenant", "admin keys only: act on this tenant's job instead of the key's own " +
		"(another key naming another tenant gets 404, as for an unknown job)", "string"}
	control := func(action, summary string) route {
		return route{
			method: http.MethodPost, path: "/v1/jobs/{id}/" + action, access: tenant, h: s.control(action),
			id: action + "Job", summary: summary, query: []param{tenantQ},
			desc: "Asks the fleet's coordinators; the job obeys at its next step boundary. " + jobID + ".",
			ok:   http.StatusOK, okBody: jsonOf[schemas.ControlResult](), errs: []int{404, 409},
		}
	}
	return append([]route{
		{method: http.MethodGet, path: "/healthz", access: public, h: s.healthz, id: "healthz",
			summary: "Liveness: 200 while the server runs and its NATS connection is up (503 otherwise)",
			ok:      http.StatusOK, okBody: &content{types: []string{"text/plain"}}},
		{method: http.MethodGet, path: "/openapi.json", access: public, h: s.openapi, id: "openapi",
			summary: "This OpenAPI 3.1 document", ok: http.StatusOK,
			okBody: &content{types: []string{"application/json"}, desc: "the OpenAPI document"}},
		{method: http.MethodGet, path: "/v1/whoami", access: tenant, h: s.whoami, id: "whoami",
			summary: "What the request's API key is: its tenant, admin, approver, name and public prefix (never its secret)",
			desc:    "Any valid key may ask about itself; a client (the dashboard) shows only what the key may use.",
			ok:      http.StatusOK, okBody: jsonOf[schemas.Whoami]()},

		{method: http.MethodPost, path: "/v1/jobs", access: tenant, h: s.submitJob, id: "submitJob",
			summary: "Submit a job as the key's tenant",
			desc: "Validates the job completely (task, params, every field) before anything is queued; a refused job " +
				"is never queued. With budget_usd, a budget below the forecast's lowest cost is refused (422 over-budget). " +
				"Resubmitting the same job under the same job_id answers 200 with duplicate true; another job under a " +
				"taken job_id is 409.",
			body: jsonOf[schemas.JobRequest](), ok: http.StatusCreated, also: http.StatusOK, okBody: jsonOf[schemas.JobCreated](),
			errs: []int{400, 409, 413, 415, 422}},
		{method: http.MethodGet, path: "/v1/jobs", access: tenant, h: s.listJobs, id: "listJobs",
			summary: "List the key's tenant's jobs by job id (generated ids are time-ordered: oldest first)",
			desc: "A page reads only its own records; with ?state= it reads at most 4 × the largest limit, so a " +
				"filtered page may hold fewer than limit jobs and still have a next_cursor.",
			query: []param{
				{"state", "only jobs in this state (as the registry records it)", "string"},
				{"limit", "page size (default 50, at most 500)", "integer"},
				{"cursor", "the next_cursor of the previous page", "string"},
				{"tenant", "admin keys only: this tenant's jobs, or every tenant's with \"*\"", "string"},
			},
			ok: http.StatusOK, okBody: jsonOf[schemas.JobList](), errs: []int{400, 403}},
		{method: http.MethodGet, path: "/v1/jobs/{id}", access: tenant, h: s.getJob, id: "getJob",
			summary: "A job's state and progress", desc: jobID + "; another tenant's job is 404.", query: []param{tenantQ},
			ok: http.StatusOK, okBody: jsonOf[schemas.JobView](), errs: []int{404}},
		{method: http.MethodGet, path: "/v1/jobs/{id}/result", access: tenant, h: s.jobResult, id: "getJobResult",
			summary: "A finished job's report (the same fields as maker result --json)",
			desc:    "409 not-finished (with the job's state) while the job has no report.", query: []param{tenantQ},
			ok: http.StatusOK, okBody: jsonOf[schemas.JobReport](), errs: []int{404, 409}},
		{method: http.MethodGet, path: "/v1/jobs/{id}/events", access: tenant, h: s.jobEvents, id: "jobEvents",
			summary: "A job's progress as Server-Sent Events",
			desc: "event: status (data: a job_status message) now and on every change, event: report (data: the " +
				"job_report) once it finishes, then the stream ends; a comment line \": ping\" every 15 s meanwhile. " +
				"A key holds at most 8 open streams (429), the server 1000 (503); a stream ends when its key is revoked.",
			query: []param{tenantQ}, ok: http.StatusOK,
			okBody: &content{types: []string{"text/event-stream"}, desc: "status events, then one report event"},
			errs:   []int{404, 429, 503}},
		{method: http.MethodGet, path: "/v1/jobs/{id}/steps", access: tenant, h: s.jobSteps, id: "jobSteps",
			summary: "A job's decided steps and progress as Server-Sent Events (the dashboard's feed)",
			desc: "event: step (id: the entry's journal sequence; data: a step summary of each decision-journal entry: " +
				"seq, type, step, samples, counted, valid, red_flagged, red_flags, votes, lead, rung, state, reason, at), " +
				"first about the ?tail= most recent entries (default 5000; tail=0: every entry from the first), or the " +
				"entries after ?after= or Last-Event-ID when given (a resuming client; tail is then ignored), then each new " +
				"one; event: status (data: a job_status message, whose samples, votes and red_flagged are the whole job's " +
				"totals) now and on every change. Once the job has its report and every entry up to its end " +
				"is sent, a last status goes out and the stream ends; a comment line \": ping\" every 15 s meanwhile. " +
				"Shares the event streams' limits: a key holds at most 8 open streams (429), the server 1000 (503); a " +
				"stream ends when its key is revoked or its job is purged.",
			query: []param{tenantQ,
				{"after", "send the entries after this journal sequence (a reconnecting client's last id), 0 to 2^63-1", "integer"},
				{"tail", "send first about this many of the most recent entries, 0 to 100000 (0: the whole journal; default 5000)", "integer"}},
			ok:     http.StatusOK,
			okBody: &content{types: []string{"text/event-stream"}, desc: "step events (step summaries) and status events"},
			errs:   []int{400, 404, 429, 503}},
		control("pause", "Pause a job at its next step boundary"),
		control("resume", "Resume a paused or budget-exhausted job"),
		control("cancel", "Cancel a job for good at its next step boundary"),
		{method: http.MethodPost, path: "/v1/jobs/{id}/decide", access: tenant, h: s.decide, id: "decideJob",
			summary: "Answer a step the fleet could not settle (the job waits for a person): approver and admin keys only",
			desc: "Only a person decides: an approver key (maker keys create --approver), for its own tenant's jobs, or an " +
				"admin key (any tenant's, with ?tenant=); any other key is 403 forbidden. The decision is recorded as by " +
				"the key's name (its prefix mk_<key id> when it has none); the body cannot name anyone (a by field is 422). " +
				"A step that does not wait for a person is 409 not-waiting. " + jobID + ".",
			query: []param{tenantQ}, body: jsonOf[schemas.DecideBody](),
			ok: http.StatusOK, okBody: jsonOf[schemas.ControlResult](), errs: []int{400, 403, 404, 409, 413, 415, 422}},

		{method: http.MethodGet, path: "/v1/jobs/{id}/budget", access: tenant, h: s.getBudget, id: "getJobBudget",
			summary: "A job's budget: its limit, what it spent and what it has reserved", query: []param{tenantQ},
			ok: http.StatusOK, okBody: jsonOf[schemas.JobBudget](), errs: []int{404, 501}},
		{method: http.MethodPut, path: "/v1/jobs/{id}/budget", access: tenant, h: s.putBudget, id: "setJobBudget",
			summary: "Set a job's budget; raise it, then resume a budget_exhausted job",
			desc:    "The job's spec keeps the budget it was submitted with; every reservation reads this one.",
			query:   []param{tenantQ}, body: jsonOf[schemas.BudgetBody](),
			ok: http.StatusOK, okBody: jsonOf[schemas.JobBudget](), errs: []int{400, 404, 409, 413, 415, 422, 501}},

		{method: http.MethodPost, path: "/v1/batches", access: tenant, h: s.createBatch, id: "createBatch",
			summary: "Submit a batch: one job per JSONL line ({\"custom_id\": ..., \"task\": ..., \"params\": {...}, \"k\": ...})",
			desc: "Invalid lines are reported by line number in the batch's error file and the rest runs; a duplicate " +
				"custom_id refuses the whole batch (422) and nothing runs.",
			query: []param{
				{"priority", "priority of the lines that set none (0 to 9)", "integer"},
				{"window", "most jobs of the batch unfinished at once (default 32)", "integer"},
				{"webhook", "a URL the batch's end is POSTed to, signed (an absolute http or https URL without user info, at most 2 KiB; docs/api.md, Webhooks)", "string"},
			},
			body: &content{types: append(jsonlTypes, "text/plain"), desc: "JSON Lines, one job per line"}, longBody: true,
			ok: http.StatusCreated, okBody: jsonOf[schemas.BatchCreated](), errs: []int{400, 413, 415, 422, 501}},
		{method: http.MethodGet, path: "/v1/batches", access: tenant, h: s.listBatches, id: "listBatches",
			summary: "List the key's tenant's batches", ok: http.StatusOK, okBody: jsonOf[schemas.BatchList](), errs: []int{501}},
		{method: http.MethodGet, path: "/v1/batches/{id}", access: tenant, h: s.getBatch, id: "getBatch",
			summary: "A batch's state and counts", ok: http.StatusOK, okBody: jsonOf[schemas.BatchRecord](), errs: []int{404, 501}},
		{method: http.MethodPost, path: "/v1/batches/{id}/cancel", access: tenant, h: s.cancelBatch, id: "cancelBatch",
			summary: "Cancel a batch: no more of its jobs start, its unfinished jobs are cancelled",
			ok:      http.StatusOK, okBody: jsonOf[schemas.BatchRecord](), errs: []int{404, 409, 501}},
		{method: http.MethodGet, path: "/v1/batches/{id}/output", access: tenant, h: s.batchOutput, id: "batchOutput",
			summary: "A batch's output: one JSON line per input line, in input order, with custom_id and the report or the error",
			ok:      http.StatusOK, okBody: &content{types: jsonlTypes[:1], desc: "JSON Lines (batch output lines)"},
			errs: []int{404, 501}},
		{method: http.MethodGet, path: "/v1/batches/{id}/errors", access: tenant, h: s.batchErrors, id: "batchErrors",
			summary: "A batch's invalid lines, one JSON line each with its line number and error",
			ok:      http.StatusOK, okBody: &content{types: jsonlTypes[:1], desc: "JSON Lines (batch error lines)"},
			errs: []int{404, 501}},

		{method: http.MethodGet, path: "/v1/tasks", access: tenant, h: s.listTasks, id: "listTasks",
			summary: "The tasks jobs may name: built-in and registered specs (each spec's latest version)",
			query:   []param{{"versions", "all: every registered version of each spec, by name, then version (semantic order)", "string"}},
			ok:      http.StatusOK, okBody: jsonOf[schemas.TaskList]()},
		{method: http.MethodGet, path: "/v1/tasks/{name}", access: tenant, h: s.getTask, id: "getTask",
			summary: "A task: a built-in, or a registered spec's versions and source (?version=, default the latest)",
			query:   []param{{"version", "a registered spec's version", "string"}},
			ok:      http.StatusOK, okBody: jsonOf[schemas.TaskInfo](), errs: []int{404}},
		{method: http.MethodPost, path: "/v1/tasks", access: admin, h: s.registerTask, id: "registerTask",
			summary: "Register a task spec (admin): its YAML or JSON source as the body",
			desc:    "201 when registered, 200 when the same spec was already; another spec under a taken name@version is 409.",
			body:    &content{types: []string{"application/yaml", "application/json", "text/yaml", "text/plain"}, desc: "the task spec file"},
			ok:      http.StatusCreated, also: http.StatusOK, okBody: jsonOf[schemas.TaskInfo](), errs: []int{403, 409, 413, 415, 422}},

		{method: http.MethodGet, path: "/v1/dlq", access: tenant, h: s.listDeadLetters, id: "listDeadLetters",
			summary: "The key's tenant's dead letters: requests the fleet gave up on, with why, oldest first",
			desc: "A dead letter too large to keep whole holds a reference (truncated, size, sha256 and its first 4 KiB). " +
				"Replaying is the operator's (maker dlq replay, or an admin key's POST /v1/dlq/replay).",
			query: []param{
				{"job", "only this job's dead letters", "string"},
				{"limit", "most dead letters (default 100, at most 1000)", "integer"},
				{"tenant", "admin keys only: this tenant's, or every tenant's with \"*\"", "string"},
			},
			ok: http.StatusOK, okBody: jsonOf[schemas.DeadLetterList](), errs: []int{400, 403}},
		{method: http.MethodPost, path: "/v1/dlq/replay", access: admin, h: s.replayDeadLetters, id: "replayDeadLetters",
			summary: "Replay dead letters (admin): publish each to its original subject again and remove it from the DLQ",
			desc: "The body names the dead letters by dlq_seq (1 to 1000). Each is replayed as maker dlq replay replays it, " +
				"with the same checks: a dead letter replays only as a sample request of the job its DLQ subject names, " +
				"from the samples stream; any other is refused with why and kept. A refused or failed one stops none of " +
				"the others: the answer lists each as replayed, refused or failed.",
			body: jsonOf[schemas.DLQReplayBody](), ok: http.StatusOK, okBody: jsonOf[schemas.DLQReplayResult](),
			errs: []int{403, 413, 415, 422}},

		{method: http.MethodPost, path: "/v1/breakglass", access: tenant, h: s.postBreakGlass, id: "breakGlass",
			summary: "Ask the judges' panel about a problem that resisted everything else (break glass)",
			desc: "The body is a break_glass_request (docs/judge.md: problem starting \"break glass:\", the three prior " +
				"attempts, files, build log...); its kind and version may be left out. The tenant and the requester come " +
				"from the API key (its name, else its prefix): a body naming others is refused (422). The judge's gates, " +
				"secret guard, limits and approvals apply as to any request. 202: queued; read the answer at the Location.",
			body: jsonOf[schemas.BreakGlassRequest](), ok: http.StatusAccepted, okBody: jsonOf[schemas.BreakGlassAccepted](),
			errs: []int{400, 413, 415, 422}},
		{method: http.MethodGet, path: "/v1/breakglass/{id}", access: tenant, h: s.getBreakGlass, id: "getBreakGlass",
			summary: "The answer to one of the key's tenant's break-glass requests: held for approval, or final",
			desc: "404 until the judges have stored an answer (and for an id the tenant never asked). With ?wait=S the " +
				"request waits up to S seconds for a final answer, then returns what is stored (a held answer) or 404.",
			query: []param{{"wait", "seconds to wait for a final answer, 0 to 60 (default 0)", "integer"}},
			ok:    http.StatusOK, okBody: jsonOf[schemas.BreakGlassResponse](), errs: []int{400, 404}},

		{method: http.MethodGet, path: "/v1/usage", access: tenant, h: s.usage, id: "getUsage",
			summary: "The key's tenant's spend today, jobs by state, and quota",
			ok:      http.StatusOK, okBody: jsonOf[schemas.Usage]()},
		{method: http.MethodGet, path: "/v1/fleet", access: admin, h: s.getFleet, id: "getFleet",
			summary: "The fleet view (admin): live voters and coordinators, the work queues' lag, totals",
			desc: "Voters and coordinators come from their presence records (bucket maker_presence), each renewed every " +
				"5 s and forgotten 30 s after its writer stops: what they claim, shown as claimed (a record that is invalid, " +
				"oversized or under another's key is left out and counted in skipped). Queues come from JetStream: " +
				"num_pending is the lag (messages not yet delivered), ack_pending those in a voter's or coordinator's hands. " +
				"samples_per_s is each voter's own rate between its last two records, summed.",
			ok: http.StatusOK, okBody: jsonOf[schemas.FleetView](), errs: []int{403}},
		{method: http.MethodGet, path: "/v1/quotas/{tenant}", access: admin, h: s.getQuota, id: "getQuota",
			summary: "A tenant's quota (admin; tenant _fleet: the fleet's limits)",
			ok:      http.StatusOK, okBody: jsonOf[schemas.TenantQuota](), errs: []int{403, 404, 501}},
		{method: http.MethodPut, path: "/v1/quotas/{tenant}", access: admin, h: s.putQuota, id: "setQuota",
			summary: "Set a tenant's quota (admin); every coordinator applies it within a second",
			body:    jsonOf[schemas.TenantQuota](), ok: http.StatusOK, okBody: jsonOf[schemas.TenantQuota](),
			errs: []int{400, 403, 404, 413, 415, 422, 501}},

		{method: http.MethodGet, path: "/v1/prices", access: tenant, h: s.listPrices, id: "listPrices",
			summary: "The fleet's price table: what each model's tokens cost, the default record first",
			desc: "Every sample is priced by the model its request named (the default record for the voters' own model), " +
				"at these prices: the job's own pricing is not taken.",
			ok: http.StatusOK, okBody: jsonOf[schemas.PriceList]()},
		{method: http.MethodPut, path: "/v1/prices/{model}", access: admin, h: s.putPrice, id: "setPrice",
			summary: "Set a model's price (admin); every coordinator prices its samples at it within a second",
			desc: "{model} is the model name, percent-encoded (openai%2Fgpt-5.5), or default for the default record, which prices the voters' own model. " +
				"The body's model, default, kind and version may be left out.",
			body: jsonOf[schemas.ModelPrice](), ok: http.StatusOK, okBody: jsonOf[schemas.ModelPrice](),
			errs: []int{400, 403, 404, 413, 415, 422}},
		{method: http.MethodDelete, path: "/v1/prices/{model}", access: admin, h: s.deletePrice, id: "deletePrice",
			summary: "Remove a model's price (admin): its samples are unpriced, and jobs under a limit that ask it pause",
			ok:      http.StatusNoContent, errs: []int{403, 404}},
	}, s.webhookRoutes()...)
}
