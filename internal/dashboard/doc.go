// Package dashboard is the dashboard of `maker serve`: a page of static
// assets (HTML, JavaScript, CSS, embedded with go:embed; its charts are its
// own few lines of <canvas> code: no CDN, no build step, a strict
// Content-Security-Policy) served under /dashboard/, and Summarize, which
// turns a decision-journal entry into the schemas.StepSummary the API's
// step stream (GET /v1/jobs/{id}/steps) sends.
//
// The assets hold no data: the page asks for an API key once, keeps it in
// the tab's sessionStorage, and reads everything through the API with the
// key in the Authorization header (never in a URL; a batch's files are
// read that way and saved from a Blob), so a key sees only what the API
// shows it. GET /v1/whoami says what the key is; the admin pages' links
// show for an admin key only (the API refuses the others anyway). Pages:
//
//   - #/jobs: GET /v1/jobs (?state=, an admin's ?tenant= or "*"), filtered
//     by task among the jobs read, newest first by submission, 50 a page;
//     each row's state carries the reason on hover, and its mean speed.
//   - #/jobs/ID (?tenant= for an admin on another tenant's job): GET
//     /v1/jobs/{id}, then the step stream read with fetch and a
//     ReadableStream: progress, the reason it stopped or waits (its
//     status's, else its report's), speed, elapsed, ETA, k (the schedule an
//     adaptive job went through), only the controls its state allows;
//     samples per step, margin at decision, red-flag rate by reason, p̂
//     (winners' votes over valid votes of the decided steps), cost by step
//     (each summary's usd and unverified_usd added up) and the k schedule
//     (each summary's k), escalations.
//   - #/batches and #/batches/ID: GET /v1/batches and /v1/batches/{id}:
//     counts, progress, output and errors files, cancel while it runs.
//   - #/dlq (admin): GET /v1/dlq, one inspected (its message, why it died,
//     its size or truncation), replayed with POST /v1/dlq/replay (the checks
//     of maker dlq replay).
//   - #/fleet (admin): GET /v1/fleet, each list a table; "not available"
//     where the route answers 404.
//
// A job's page asks the step stream for the journal's last 5,000 entries
// (?tail=), not the whole journal, and resumes with ?after= on a
// reconnect; its charts keep at most 5,000 points (neighbours merged in
// pairs, keeping the largest sample count and the smallest margin), so p̂,
// the red-flag reasons, the cost and the k schedule cover the entries
// streamed, while the whole job's totals (samples, votes, red flags,
// spent) come from its status. The jobs list is re-read every 10 s, and
// not while the tab is hidden.
package dashboard
