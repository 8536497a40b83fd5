// Package dashboard is the live dashboard of `maker serve`: a page of
// static assets (HTML, JavaScript, CSS, embedded with go:embed; its
// charts are its own few lines of <canvas> code: no CDN, no build step)
// served under /dashboard/, and Summarize, which turns a decision-journal
// entry into the schemas.StepSummary the API's step stream
// (GET /v1/jobs/{id}/steps) sends.
//
// The assets hold no data: the page asks for an API key once, keeps it in
// the tab's sessionStorage, and reads everything through the API with the
// key in the Authorization header (never in a URL), so a key sees only its
// tenant's jobs, as everywhere in the API. Pages: the tenant's jobs
// (GET /v1/jobs) and a job's page (GET /v1/jobs/{id}, then the step
// stream read with fetch and a ReadableStream): its progress and control,
// samples per step and margin at decision, red-flag rate by reason, p̂
// (winners' votes over valid votes of the decided steps), cost over time
// and escalations.
//
// A job's page asks the step stream for the journal's last 5,000 entries
// (?tail=), not the whole journal, and resumes with ?after= on a
// reconnect; its charts keep at most 5,000 points (neighbours merged in
// pairs, keeping the largest sample count and the smallest margin), so p̂,
// the red-flag reasons and the charts cover the entries streamed, while
// the whole job's totals (samples, votes, red flags, cost) come from its
// status. The jobs list is sorted newest first by submission time; its
// 10 s refresh re-reads only the first page, and none while the tab is
// hidden.
package dashboard
