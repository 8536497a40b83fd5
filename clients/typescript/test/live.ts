// live.ts checks the client against a live maker serve (run by
// clients/clients_test.go, which starts the fleet, the server and a key):
// MAKER_API_URL, MAKER_API_KEY, MAKER_JOB_PREFIX, MAKER_WEBHOOK_FIXTURE
// (a delivery signed by the Go test, with its secret), MAKER_WEBHOOK_URL (the
// Go test's receiver) and MAKER_WEBHOOK_DIR (where it writes each delivery
// it gets) come from the environment. It exits non-zero on the first failed check and prints,
// last, one JSON line of what it saw for the Go test to compare.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";

import {
  MakerAPIError,
  MakerClient,
  PROBLEM_BASE,
  parseSSE,
  signWebhook,
  verifyWebhook,
  WebhookVerificationError,
  type BatchCounts,
  type BatchOutputLine,
  type JobReport,
  type JobStatus,
} from "../src/index.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

const baseUrl = env("MAKER_API_URL");
const apiKey = env("MAKER_API_KEY");
const prefix = env("MAKER_JOB_PREFIX");
const fixture = JSON.parse(env("MAKER_WEBHOOK_FIXTURE")) as {
  secret: string;
  id: string;
  timestamp: number;
  body: string;
  signature: string;
  old_timestamp: number;
  old_signature: string;
};
const hookUrl = env("MAKER_WEBHOOK_URL");
const hookDir = env("MAKER_WEBHOOK_DIR");

/** received polls hookDir (every 100 ms, at most 30 s) until the receiver has written n deliveries, and reads them. */
async function received(n: number): Promise<{ headers: Record<string, string[]>; body: Uint8Array }[]> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const names = (await readdir(hookDir)).filter((f) => f.endsWith(".json")).sort();
    if (names.length >= n) {
      return Promise.all(
        names.map(async (f) => {
          const d = JSON.parse(await readFile(join(hookDir, f), "utf8")) as { headers: Record<string, string[]>; body: string };
          return { headers: d.headers, body: Buffer.from(d.body, "base64") };
        }),
      );
    }
    if (Date.now() > deadline) throw new Error(`${names.length} deliveries in ${hookDir} after 30 s, want ${n}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The body of a delivery (schemas.WebhookEvent). */
interface WebhookEvent {
  type: string;
  data: {
    tenant: string;
    job_id?: string;
    batch_id?: string;
    state: string;
    report?: { solved: boolean; steps: number };
    counts?: BatchCounts;
    links?: Record<string, string>;
  };
}

async function problem(p: Promise<unknown>): Promise<MakerAPIError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof MakerAPIError) return e;
    throw e;
  }
  throw new Error("the call succeeded; want a problem");
}

async function rejected(p: Promise<unknown>, why: RegExp): Promise<void> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof WebhookVerificationError, `want WebhookVerificationError, got ${String(e)}`);
    assert.match(e.message, why);
    return;
  }
  throw new Error(`verifyWebhook accepted a delivery it must refuse (${why})`);
}

const seen: Record<string, unknown> = {};
const c = new MakerClient({ baseUrl, apiKey });

// Submit (idempotent by job_id) and follow the events to the report.
const id = `${prefix}-hanoi`;
const created = await c.submitJob({ task: "hanoi", params: { disks: 3 }, k: 1, job_id: id });
assert.equal(created.id, id);
assert.equal(created.duplicate, false);
const again = await c.submitJob({ task: "hanoi", params: { disks: 3 }, k: 1, job_id: id });
assert.equal(again.duplicate, true, "a resubmit under the same job_id is a duplicate");
const statuses: JobStatus[] = [];
let report: JobReport | undefined;
let after = 0;
for await (const ev of c.events(id)) {
  if (report) after++;
  if (ev.event === "status") statuses.push(ev.data);
  else if (ev.event === "report") report = ev.data;
  else throw new Error(`an event named ${ev.name}`);
}
assert.ok(report, "the event stream ended without a report");
assert.equal(after, 0, "events after the report");
assert.ok(statuses.length >= 1, "no status event before the report");
assert.equal(statuses[0]!.job_id, id);
assert.equal(report.job_id, id);
assert.equal(report.solved, true);
assert.equal(report.steps, 7, "3 disks take 7 moves");
const waited = await c.waitForResult(id, { onStatus: (s) => assert.equal(s.job_id, id) });
assert.deepEqual(waited, report, "waitForResult gives the stream's report");
assert.deepEqual(await c.getResult(id), report);
const view = await c.getJob(id);
assert.equal(view.state, "solved");
seen.report = { job_id: report.job_id, tenant: report.tenant, solved: report.solved, steps: report.steps };
seen.status_events = statuses.length;

// Paging: two jobs, a page of one each.
const id2 = `${prefix}-second`;
await c.submitJob({ task: "hanoi", params: { disks: 2 }, k: 1, job_id: id2 });
assert.equal((await c.waitForResult(id2)).steps, 3);
const page = await c.listJobs({ limit: 1 });
assert.equal(page.jobs?.length, 1);
assert.ok(page.next_cursor, "a page of one of several jobs has a next_cursor");
const all: string[] = [];
for await (const j of c.jobs({ limit: 1, state: "solved" })) all.push(j.id);
assert.ok(all.includes(id) && all.includes(id2), `jobs() paged over ${all.join(",")}`);
seen.listed = all.filter((j) => j.startsWith(prefix)).sort();

// Problems: unknown job (404), bad query (400), invalid job (422).
let p = await problem(c.pause(`${prefix}-nope`));
assert.equal(p.status, 404);
assert.equal(p.type, PROBLEM_BASE + "not-found");
assert.equal(p.kind, "not-found");
assert.equal(p.title, "Not found");
assert.equal(p.instance, `/v1/jobs/${prefix}-nope/pause`);
const unknownCalls: ((id: string) => Promise<unknown>)[] = [(i) => c.resume(i), (i) => c.cancel(i), (i) => c.getResult(i), (i) => c.getJob(i)];
for (const call of unknownCalls) {
  assert.equal((await problem(call(`${prefix}-nope`))).status, 404);
}
p = await problem(c.listJobs({ state: "bogus" }));
assert.equal(p.status, 400);
assert.equal(p.kind, "bad-request");
assert.match(p.detail ?? "", /bogus/);
p = await problem(c.submitJob({ task: "hanoi", params: { disks: 0 }, k: 1 }));
assert.equal(p.status, 422);
assert.equal(p.kind, "invalid-request");
assert.equal(p.errors[0]?.path, "/params/disks");
seen.invalid_path = p.errors[0]?.path;
p = await problem(c.submitJob({ task: "hanoi", params: { disks: 4 }, k: 1, job_id: id }));
assert.equal(p.status, 409, "another job under a taken job_id");

// Controls on a running job: pause, resume, cancel, and its report says cancelled.
const long = `${prefix}-long`;
await c.submitJob({ task: "hanoi", params: { disks: 16 }, k: 1, job_id: long });
const paused = await c.pause(long);
assert.equal(paused.control, "pause");
assert.equal((await c.resume(long)).control, "run");
const cancelled = await c.cancel(long);
assert.equal(cancelled.control, "cancel");
const longReport = await c.waitForResult(long);
assert.equal(longReport.solved, false);
assert.equal((await c.getJob(long)).state, "cancelled");
seen.cancelled_state = (await c.getJob(long)).state;

// Budget: read, and a finished job's is not set (409 finished).
const budget = await c.getBudget(id);
assert.equal(budget.id, id);
p = await problem(c.setBudget(id, 5));
assert.equal(p.status, 409);
assert.equal(p.kind, "finished");

// Batches: two good lines and an invalid one.
// The batch names the receiver as its webhook (checked below).
const batch = await c.createBatch(
  [
    { custom_id: "first", task: "hanoi", params: { disks: 2 }, k: 1 },
    { custom_id: "broken", task: "hanoi", params: { disks: 0 }, k: 1 },
    '{"custom_id": "third", "task": "hanoi", "params": {"disks": 3}, "k": 1}',
  ],
  { webhook: hookUrl },
);
assert.equal(batch.counts.total, 3);
const done = await c.waitForBatch(batch.id, { intervalMs: 100 });
assert.equal(done.state, "completed");
assert.equal(done.counts.completed, 2);
assert.equal(done.counts.failed, 1);
const out: BatchOutputLine[] = await c.batchOutput(batch.id);
assert.deepEqual(out.map((l) => l.custom_id), ["first", "broken", "third"]);
assert.equal(out[0]!.response?.steps, 3);
assert.equal(out[2]!.response?.steps, 7);
assert.ok(out[1]!.error, "the invalid line has an error");
const errs = await c.batchErrors(batch.id);
assert.deepEqual(errs.map((l) => [l.custom_id, l.line]), [["broken", 2]]);
assert.ok((await c.listBatches()).some((b) => b.id === batch.id));
assert.equal((await c.getBatch(batch.id)).state, "completed");
assert.equal((await problem(c.cancelBatch(batch.id))).status, 409, "an ended batch is not cancelled");
assert.equal((await problem(c.getBatch("nope"))).status, 404);
seen.batch = { id: batch.id, state: done.state, counts: done.counts, output: out.map((l) => l.custom_id) };

// Tasks, usage, dead letters.
assert.ok((await c.listTasks()).some((t) => t.name === "hanoi"));
assert.equal((await c.getTask("hanoi")).name, "hanoi");
assert.equal((await problem(c.getTask("no-such-task"))).status, 404);
const usage = await c.usage();
assert.ok((usage.jobs?.solved ?? 0) >= 2, `usage counts ${JSON.stringify(usage.jobs)}`);
assert.ok(Array.isArray(await c.deadLetters({ limit: 5 })));

// A key the server does not know: 401.
const unknownKey = ["mk", "0".repeat(12), "x".repeat(43)].join("_");
const stranger = new MakerClient({ baseUrl, apiKey: unknownKey });
p = await problem(stranger.listJobs());
assert.equal(p.status, 401);
assert.equal(p.kind, "unauthorized");
seen.unauthorized = p.status;

// Retry-After: an idempotent call answered 429 is tried again; a batch is not.
let calls = 0;
const flaky: typeof fetch = async (input, init) => {
  calls++;
  if (calls === 1) {
    return new Response(JSON.stringify({ type: PROBLEM_BASE + "rate-limited", title: "Too many requests", status: 429 }), {
      status: 429,
      headers: { "Content-Type": "application/problem+json", "Retry-After": "1" },
    });
  }
  return fetch(input, init);
};
const retrying = new MakerClient({ baseUrl, apiKey, fetch: flaky });
const t0 = Date.now();
assert.equal((await retrying.getJob(id)).id, id);
assert.equal(calls, 2);
assert.ok(Date.now() - t0 >= 900, "the retry waited for Retry-After");
calls = 0;
p = await problem(retrying.createBatch([{ custom_id: "x", task: "hanoi", params: { disks: 2 }, k: 1 }]));
assert.equal(p.status, 429);
assert.equal(p.retryAfter, 1);
assert.equal(calls, 1, "a batch is not retried");
const patient = new MakerClient({ baseUrl, apiKey, fetch: flaky, maxRetries: 0 });
calls = 0;
assert.equal((await problem(patient.getJob(id))).status, 429);

// The event parser: comments, CRLF and CR line ends, events split across chunks.
const chunks = [": ping\n\n", "event: status\r\ndata: {\"a\"", ":1}\r\n\r\n: ping\r", "\nevent: report\rdata: [1,\ndata: 2]\r\r", "data: dropped"];
const stream = new ReadableStream<Uint8Array>({
  start(ctl) {
    for (const ch of chunks) ctl.enqueue(new TextEncoder().encode(ch));
    ctl.close();
  },
});
const parsed = [];
for await (const ev of parseSSE(stream, 1 << 20)) parsed.push(ev);
assert.deepEqual(parsed, [
  { event: "status", data: '{"a":1}' },
  { event: "report", data: "[1,\n2]" },
]);

// Webhooks: the Go test's delivery, and tampered ones.
const hdrs = (ts: number, sig: string) => ({ "webhook-id": fixture.id, "webhook-timestamp": String(ts), "webhook-signature": sig });
const payload = await verifyWebhook(fixture.secret, hdrs(fixture.timestamp, fixture.signature), fixture.body);
assert.deepEqual(payload, JSON.parse(fixture.body));
const viaHeaders = new Headers(hdrs(fixture.timestamp, "v1,bm90IGl0 " + fixture.signature));
assert.deepEqual(await verifyWebhook(fixture.secret, viaHeaders, new TextEncoder().encode(fixture.body)), payload);
assert.equal(await signWebhook(fixture.secret, fixture.id, fixture.timestamp, fixture.body), fixture.signature);
const key = Buffer.from(fixture.secret.slice("whsec_".length), "base64");
const independent = "v1," + createHmac("sha256", key).update(`${fixture.id}.${fixture.timestamp}.${fixture.body}`).digest("base64");
assert.equal(independent, fixture.signature);
await rejected(verifyWebhook(fixture.secret, hdrs(fixture.timestamp, fixture.signature), fixture.body.replace("}", ',"x":1}')), /signature/);
await rejected(verifyWebhook(fixture.secret, hdrs(fixture.old_timestamp, fixture.old_signature), fixture.body), /too old/);
await rejected(verifyWebhook(fixture.secret, hdrs(fixture.timestamp + 3600, fixture.signature), fixture.body), /future/);
await rejected(verifyWebhook("whsec_" + Buffer.from("another secret").toString("base64"), hdrs(fixture.timestamp, fixture.signature), fixture.body), /signature/);
await rejected(verifyWebhook(fixture.secret, hdrs(fixture.timestamp, fixture.signature.replace("v1,", "v2,")), fixture.body), /signature/);
await rejected(verifyWebhook(fixture.secret, { "webhook-id": fixture.id }, fixture.body), /missing/);
// The old delivery passes with a tolerance that covers it: only its age was wrong.
assert.deepEqual(await verifyWebhook(fixture.secret, hdrs(fixture.old_timestamp, fixture.old_signature), fixture.body, { toleranceSeconds: 7200 }), payload);
seen.webhook = "ok";

// Real deliveries: a job naming the receiver (and the batch above); each
// delivery the receiver got is verified with the secret fetched here.
const secret = await c.getWebhookSecret();
assert.equal(secret.tenant, report.tenant, "the secret is the key's own tenant's");
assert.match(secret.secret, /^whsec_[A-Za-z0-9+/]+=*$/);
p = await problem(c.submitJob({ task: "hanoi", params: { disks: 2 }, k: 1, webhook: "ftp://example.com/hook" }));
assert.equal(p.status, 422);
assert.equal(p.errors[0]?.path, "/webhook");
const hookJob = `${prefix}-hook`;
await c.submitJob({ task: "hanoi", params: { disks: 2 }, k: 1, job_id: hookJob, webhook: hookUrl });
assert.equal((await c.waitForResult(hookJob)).steps, 3);
const got = await received(2);
const events = new Map<string, WebhookEvent>();
for (const d of got) {
  const ev = (await verifyWebhook(secret.secret, d.headers, d.body)) as WebhookEvent;
  const hookId = d.headers["webhook-id"]?.[0] ?? "";
  assert.equal(ev.data.tenant, report.tenant);
  events.set(hookId, ev);
  // The same delivery with a byte more, or under another tenant's secret, is refused.
  await rejected(verifyWebhook(secret.secret, d.headers, new Uint8Array([...d.body, 0x20])), /signature/);
  await rejected(verifyWebhook(fixture.secret, d.headers, d.body), /signature/);
}
const jobEvent = [...events.entries()].find(([, ev]) => ev.type === "job.finished");
const batchEvent = [...events.entries()].find(([, ev]) => ev.type === "batch.finished");
assert.ok(jobEvent && batchEvent, `deliveries ${JSON.stringify([...events.values()])}`);
assert.equal(jobEvent[1].data.job_id, hookJob);
assert.equal(jobEvent[1].data.state, "solved");
assert.equal(jobEvent[1].data.report?.steps, 3);
assert.equal(jobEvent[1].data.links?.self, `/v1/jobs/${hookJob}`);
assert.equal(batchEvent[1].data.batch_id, batch.id);
assert.equal(batchEvent[1].data.state, "completed");
assert.deepEqual(batchEvent[1].data.counts, done.counts);
// The deliveries list says delivered (the receiver answered before the server recorded it: poll, bounded).
const deadline = Date.now() + 30_000;
for (;;) {
  const list = await c.listWebhookDeliveries({ limit: 10 });
  const mine = [...events.keys()].map((k) => list.find((d) => d.id === k));
  if (mine.every((d) => d?.state === "delivered")) {
    for (const d of mine) {
      assert.equal(d!.attempts?.length, 1);
      assert.equal(d!.attempts?.[0]?.status_code, 204);
      assert.equal(d!.url, hookUrl);
    }
    seen.delivered = Object.fromEntries(
      mine.map((d) => [d!.id, { type: d!.type, job_id: d!.job_id ?? "", batch_id: d!.batch_id ?? "", state: d!.state }]),
    );
    break;
  }
  if (Date.now() > deadline) throw new Error(`deliveries not delivered after 30 s: ${JSON.stringify(list)}`);
  await new Promise((r) => setTimeout(r, 100));
}
assert.equal((await c.listWebhookDeliveries({ limit: 1 })).length, 1);
assert.equal((await problem(c.listWebhookDeliveries({ limit: 0 }))).status, 400);
const hookView = await c.getJob(hookJob);
assert.equal(hookView.webhook?.state, "delivered");
assert.equal(hookView.webhook?.id, jobEvent[0]);
assert.equal((await c.getBatch(batch.id)).webhook_delivery?.state, "delivered");

console.log(JSON.stringify({ ok: true, ...seen }));
