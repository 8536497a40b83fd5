import { MakerAPIError, problemOf } from "./errors.js";
import type {
  BatchOutputLine,
  BatchRecord,
  BatchList,
  ControlResult,
  DeadLetterList,
  DecideBody,
  JobBudget,
  JobCreated,
  JobList,
  JobReport,
  JobRequest,
  JobStatus,
  JobView,
  StoredDeadLetter,
  TaskInfo,
  TaskList,
  Usage,
  WebhookDelivery,
  WebhookDeliveryList,
  WebhookSecret,
} from "./openapi.js";
import { parseSSE } from "./sse.js";

/** Options configure a MakerClient. */
export interface ClientOptions {
  /** baseUrl is the API's address, e.g. "http://127.0.0.1:8080". */
  baseUrl: string;
  /** apiKey is the key, mk_<key id>_<secret> (maker keys create). */
  apiKey: string;
  /** fetch sends the requests. Default: the global fetch. */
  fetch?: typeof fetch;
  /** userAgent is sent with every request. Default "makerfleet-typescript". */
  userAgent?: string;
  /** tenant (admin keys only) acts on this tenant's jobs and dead letters (?tenant=). */
  tenant?: string;
  /**
   * maxRetries bounds how many times an idempotent call answered 429 or
   * 503 is tried again after the Retry-After wait. Default 3; 0: never.
   */
  maxRetries?: number;
  /** maxRetryDelayMs is the longest wait before a retry; a longer Retry-After is not waited for (the error is thrown). Default 30000. */
  maxRetryDelayMs?: number;
  /** maxEventBytes bounds one event of an event stream. Default 16 MiB. */
  maxEventBytes?: number;
}

/** CallOptions are each call's own. */
export interface CallOptions {
  /** signal aborts the call (and ends an event stream). */
  signal?: AbortSignal;
}

/** ListJobsOptions select a page of jobs; unset fields take the server's defaults. */
export interface ListJobsOptions extends CallOptions {
  /** state keeps only jobs in this state. */
  state?: string;
  /** limit is the page size (server default 50, at most 500). */
  limit?: number;
  /** cursor is the previous page's next_cursor. */
  cursor?: string;
}

/** BatchOptions configure a batch; unset fields take the server's defaults. */
export interface BatchOptions extends CallOptions {
  /** priority of the lines that set none, 0 to 9. */
  priority?: number;
  /** window is the most jobs of the batch unfinished at once (default 32). */
  window?: number;
  /** webhook is a URL the batch's end (a batch.finished event) is POSTed to, signed (?webhook=). */
  webhook?: string;
}

/** ListWebhookDeliveriesOptions select the deliveries listed. */
export interface ListWebhookDeliveriesOptions extends CallOptions {
  /** limit is the most deliveries (server default 100, at most 1000). */
  limit?: number;
}

/** A batch line: a job object ({custom_id, task, params, k...}) or a JSON text. */
export type BatchLine = Record<string, unknown> | string;

/**
 * JobEvent is one event of a job's event stream: its status, or, last, its
 * report. An event of another name (none today) is "other", with its name.
 */
export type JobEvent =
  | { event: "status"; data: JobStatus }
  | { event: "report"; data: JobReport }
  | { event: "other"; name: string; data: unknown };

/** WaitOptions configure waitForResult. */
export interface WaitOptions extends CallOptions {
  /** onStatus receives each status while the job runs. */
  onStatus?: (s: JobStatus) => void;
}

/** Job states after which a job changes no more. */
export const TERMINAL_STATES: readonly string[] = ["solved", "unsolved", "no_consensus", "failed", "cancelled"];

interface RequestOptions extends CallOptions {
  query?: Record<string, string | number | undefined>;
  body?: string;
  contentType?: string;
  accept?: string;
  /** idempotent calls are retried on 429 and 503. */
  idempotent: boolean;
}

const enc = encodeURIComponent;

/**
 * MakerClient calls one API server (maker serve) with one key. Every
 * error answer is thrown as a MakerAPIError; idempotent calls (reads,
 * PUTs, controls, and a submit naming its job_id) answered 429 or 503 are
 * tried again after the Retry-After wait, a bounded number of times.
 */
export class MakerClient {
  readonly baseUrl: string;
  readonly #key: string;
  readonly #fetch: typeof fetch;
  readonly #ua: string;
  readonly #tenant: string | undefined;
  readonly #maxRetries: number;
  readonly #maxRetryDelayMs: number;
  readonly #maxEventBytes: number;
  readonly #opts: ClientOptions;

  constructor(opts: ClientOptions) {
    let u: URL;
    try {
      u = new URL(opts.baseUrl);
    } catch {
      throw new TypeError(`makerfleet: base URL ${JSON.stringify(opts.baseUrl)}: want http(s)://host[:port]`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
      throw new TypeError(`makerfleet: base URL ${JSON.stringify(opts.baseUrl)}: want http(s)://host[:port]`);
    }
    if (!opts.apiKey) throw new TypeError("makerfleet: no API key");
    u.search = "";
    u.hash = "";
    this.#opts = opts;
    this.baseUrl = u.toString().replace(/\/+$/, "");
    this.#key = opts.apiKey;
    this.#fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.#ua = opts.userAgent ?? "makerfleet-typescript";
    this.#tenant = opts.tenant;
    this.#maxRetries = Math.max(0, opts.maxRetries ?? 3);
    this.#maxRetryDelayMs = opts.maxRetryDelayMs ?? 30_000;
    this.#maxEventBytes = opts.maxEventBytes ?? 16 << 20;
  }

  /** forTenant returns a client acting on tenant's jobs and dead letters (an admin key's). */
  forTenant(tenant: string): MakerClient {
    return new MakerClient({ ...this.#opts, tenant });
  }

  // Jobs.

  /**
   * submitJob submits a job as the key's tenant. The same job under the
   * same job_id again answers duplicate: true (so a submit naming its
   * job_id is retried safely); another job under a taken id is a 409
   * problem; an invalid one 422 naming the failing field in errors.
   */
  async submitJob(req: JobRequest, o: CallOptions = {}): Promise<JobCreated> {
    return this.#json<JobCreated>("POST", "/v1/jobs", {
      ...o,
      body: JSON.stringify(req),
      idempotent: typeof req.job_id === "string" && req.job_id !== "",
    });
  }

  /** getJob returns a job's state and progress (another tenant's job is 404). */
  async getJob(id: string, o: CallOptions = {}): Promise<JobView> {
    return this.#json<JobView>("GET", `/v1/jobs/${enc(id)}`, { ...o, idempotent: true });
  }

  /** listJobs returns a page of the tenant's jobs; next_cursor fetches the next. */
  async listJobs(o: ListJobsOptions = {}): Promise<JobList> {
    const list = await this.#json<JobList>("GET", "/v1/jobs", {
      ...o,
      query: { state: o.state, limit: o.limit, cursor: o.cursor },
      idempotent: true,
    });
    list.jobs ??= [];
    return list;
  }

  /** jobs iterates over every job of the tenant (in state, when given), page by page. */
  async *jobs(o: Omit<ListJobsOptions, "cursor"> = {}): AsyncGenerator<JobView, void, undefined> {
    let cursor: string | undefined;
    do {
      const page = await this.listJobs({ ...o, ...(cursor ? { cursor } : {}) });
      yield* page.jobs ?? [];
      cursor = page.next_cursor;
    } while (cursor);
  }

  /** getResult returns a finished job's report; before it has one, a 409 problem of kind not-finished whose state says where the job stands. */
  async getResult(id: string, o: CallOptions = {}): Promise<JobReport> {
    return this.#json<JobReport>("GET", `/v1/jobs/${enc(id)}/result`, { ...o, idempotent: true });
  }

  /** pause asks the job to pause at its next step boundary. */
  async pause(id: string, o: CallOptions = {}): Promise<ControlResult> {
    return this.#control(id, "pause", "{}", o);
  }

  /** resume asks a paused (or budget-exhausted) job to run on. */
  async resume(id: string, o: CallOptions = {}): Promise<ControlResult> {
    return this.#control(id, "resume", "{}", o);
  }

  /** cancel asks the job to end for good at its next step boundary. */
  async cancel(id: string, o: CallOptions = {}): Promise<ControlResult> {
    return this.#control(id, "cancel", "{}", o);
  }

  /** decide answers the step the job waits at for a person (approver and admin keys only). */
  async decide(id: string, d: DecideBody, o: CallOptions = {}): Promise<ControlResult> {
    return this.#control(id, "decide", JSON.stringify(d), o);
  }

  async #control(id: string, action: string, body: string, o: CallOptions): Promise<ControlResult> {
    return this.#json<ControlResult>("POST", `/v1/jobs/${enc(id)}/${action}`, { ...o, body, idempotent: true });
  }

  /** getBudget returns the job's budget: its limit, what it spent and what it has reserved. */
  async getBudget(id: string, o: CallOptions = {}): Promise<JobBudget> {
    return this.#json<JobBudget>("GET", `/v1/jobs/${enc(id)}/budget`, { ...o, idempotent: true });
  }

  /** setBudget sets the job's budget in US dollars; raise it, then resume a budget_exhausted job. */
  async setBudget(id: string, usd: number, o: CallOptions = {}): Promise<JobBudget> {
    return this.#json<JobBudget>("PUT", `/v1/jobs/${enc(id)}/budget`, {
      ...o,
      body: JSON.stringify({ budget_usd: usd }),
      idempotent: true,
    });
  }

  /**
   * events follows the job's event stream: a status event now and on every
   * change, then the report event once the job finishes, and the iteration
   * ends (no reconnect). Comments (": ping") are skipped. Breaking out of
   * the loop closes the stream.
   */
  async *events(id: string, o: CallOptions = {}): AsyncGenerator<JobEvent, void, undefined> {
    const res = await this.#request("GET", `/v1/jobs/${enc(id)}/events`, {
      ...o,
      accept: "text/event-stream",
      idempotent: true,
    });
    if (!res.body) throw new Error("makerfleet: the event stream has no body");
    for await (const ev of parseSSE(res.body, this.#maxEventBytes)) {
      let data: unknown;
      try {
        data = JSON.parse(ev.data);
      } catch (e) {
        throw new Error(`makerfleet: ${ev.event} event: ${(e as Error).message}`);
      }
      if (ev.event === "status") yield { event: "status", data: data as JobStatus };
      else if (ev.event === "report") yield { event: "report", data: data as JobReport };
      else yield { event: "other", name: ev.event, data };
    }
  }

  /**
   * waitForResult follows the job's events until its report and returns
   * it. A stream that ends without a report (the server stopped) reads the
   * result instead: a 409 not-finished problem if the job has none yet.
   */
  async waitForResult(id: string, o: WaitOptions = {}): Promise<JobReport> {
    for await (const ev of this.events(id, o)) {
      if (ev.event === "report") return ev.data;
      if (ev.event === "status") o.onStatus?.(ev.data);
    }
    return this.getResult(id, o);
  }

  // Batches.

  /**
   * createBatch submits a batch, one job per line: a JSONL text, or lines
   * (job objects or JSON texts) joined as JSONL. Invalid lines go to the
   * batch's error file and the rest runs; a duplicate custom_id refuses
   * the whole batch (422). Not retried: a second call is a second batch.
   */
  async createBatch(lines: string | Iterable<BatchLine>, o: BatchOptions = {}): Promise<BatchRecord> {
    let body: string;
    if (typeof lines === "string") {
      body = lines;
    } else {
      const out: string[] = [];
      for (const l of lines) {
        const s = typeof l === "string" ? l : JSON.stringify(l);
        if (/[\r\n]/.test(s)) throw new TypeError("makerfleet: a batch line holds a line break");
        out.push(s);
      }
      body = out.join("\n") + "\n";
    }
    return this.#json<BatchRecord>("POST", "/v1/batches", {
      ...o,
      query: { priority: o.priority, window: o.window, webhook: o.webhook },
      body,
      contentType: "application/jsonl",
      idempotent: false,
    });
  }

  /** getBatch returns the batch's state and counts. */
  async getBatch(id: string, o: CallOptions = {}): Promise<BatchRecord> {
    return this.#json<BatchRecord>("GET", `/v1/batches/${enc(id)}`, { ...o, idempotent: true });
  }

  /** listBatches returns the tenant's batches, oldest first. */
  async listBatches(o: CallOptions = {}): Promise<BatchRecord[]> {
    const l = await this.#json<BatchList>("GET", "/v1/batches", { ...o, idempotent: true });
    return l.batches ?? [];
  }

  /** cancelBatch stops the batch: no more of its jobs start, its unfinished jobs are cancelled (an ended batch is 409). */
  async cancelBatch(id: string, o: CallOptions = {}): Promise<BatchRecord> {
    return this.#json<BatchRecord>("POST", `/v1/batches/${enc(id)}/cancel`, { ...o, body: "{}", idempotent: true });
  }

  /** batchOutput returns the batch's output: one line per input line, in input order, with custom_id and the report or the error. */
  async batchOutput(id: string, o: CallOptions = {}): Promise<BatchOutputLine[]> {
    return jsonl<BatchOutputLine>(await this.#text(`/v1/batches/${enc(id)}/output`, o));
  }

  /** batchErrors returns the batch's invalid lines, each with its line number and error. */
  async batchErrors(id: string, o: CallOptions = {}): Promise<BatchOutputLine[]> {
    return jsonl<BatchOutputLine>(await this.#text(`/v1/batches/${enc(id)}/errors`, o));
  }

  /** waitForBatch polls the batch every intervalMs (default 1000) until it has ended, and returns it. */
  async waitForBatch(id: string, o: CallOptions & { intervalMs?: number } = {}): Promise<BatchRecord> {
    for (;;) {
      const b = await this.getBatch(id, o);
      if (b.state !== "queued" && b.state !== "running" && b.state !== "cancelling") return b;
      await sleep(o.intervalMs ?? 1000, o.signal);
    }
  }

  // Tasks, usage, dead letters.

  /** listTasks lists the tasks jobs may name (with versions: "all", every registered version of each spec). */
  async listTasks(o: CallOptions & { versions?: "all" } = {}): Promise<TaskInfo[]> {
    const l = await this.#json<TaskList>("GET", "/v1/tasks", { ...o, query: { versions: o.versions }, idempotent: true });
    return l.tasks ?? [];
  }

  /** getTask returns a task: a built-in, or a registered spec's versions and source (default its latest version). */
  async getTask(name: string, o: CallOptions & { version?: string } = {}): Promise<TaskInfo> {
    return this.#json<TaskInfo>("GET", `/v1/tasks/${enc(name)}`, { ...o, query: { version: o.version }, idempotent: true });
  }

  /** usage returns the tenant's spend today, jobs by state, and quota. */
  async usage(o: CallOptions = {}): Promise<Usage> {
    return this.#json<Usage>("GET", "/v1/usage", { ...o, idempotent: true });
  }

  /** deadLetters returns the tenant's dead letters (of job, when given), oldest first. */
  async deadLetters(o: CallOptions & { job?: string; limit?: number } = {}): Promise<StoredDeadLetter[]> {
    const l = await this.#json<DeadLetterList>("GET", "/v1/dlq", {
      ...o,
      query: { job: o.job, limit: o.limit },
      idempotent: true,
    });
    return l.dead_letters ?? [];
  }

  // Webhooks.

  /**
   * getWebhookSecret returns the key's own tenant's webhook signing secret
   * (whsec_...): pass it to verifyWebhook. Each tenant has its own; a key
   * never reads another's. A server that makes no deliveries answers 501.
   */
  async getWebhookSecret(o: CallOptions = {}): Promise<WebhookSecret> {
    return this.#json<WebhookSecret>("GET", "/v1/webhooks/secret", { ...o, idempotent: true });
  }

  /** listWebhookDeliveries returns the tenant's webhook deliveries, newest first: each one's state (pending, delivered, failed) and attempts. */
  async listWebhookDeliveries(o: ListWebhookDeliveriesOptions = {}): Promise<WebhookDelivery[]> {
    const l = await this.#json<WebhookDeliveryList>("GET", "/v1/webhooks/deliveries", {
      ...o,
      query: { limit: o.limit },
      idempotent: true,
    });
    return l.deliveries ?? [];
  }

  // Plumbing.

  async #json<T>(method: string, path: string, o: RequestOptions): Promise<T> {
    const res = await this.#request(method, path, o);
    const text = await res.text();
    try {
      return JSON.parse(text) as T;
    } catch (e) {
      throw new Error(`makerfleet: read ${method} ${path} answer: ${(e as Error).message}`);
    }
  }

  async #text(path: string, o: CallOptions): Promise<string> {
    const res = await this.#request("GET", path, { ...o, accept: "application/jsonl", idempotent: true });
    return res.text();
  }

  /** #request sends a request and returns a successful (2xx) answer; any other is thrown as a MakerAPIError. */
  async #request(method: string, path: string, o: RequestOptions): Promise<Response> {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(o.query ?? {})) {
      if (v !== undefined && v !== "") q.set(k, String(v));
    }
    if (this.#tenant && (path.startsWith("/v1/jobs") || path === "/v1/dlq")) q.set("tenant", this.#tenant);
    const qs = q.toString();
    const url = this.baseUrl + path + (qs ? `?${qs}` : "");
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.#key}`,
      Accept: `${o.accept ?? "application/json"}, application/problem+json`,
      "User-Agent": this.#ua,
    };
    if (o.body !== undefined) headers["Content-Type"] = o.contentType ?? "application/json";
    for (let attempt = 0; ; attempt++) {
      // The API never redirects: a redirect is refused, so the key is never sent elsewhere.
      const init: RequestInit = { method, headers, redirect: "error" };
      if (o.body !== undefined) init.body = o.body;
      if (o.signal) init.signal = o.signal;
      const res = await this.#fetch(url, init);
      if (res.ok) return res;
      const err = await problemOf(res);
      if (o.idempotent && (res.status === 429 || res.status === 503) && attempt < this.#maxRetries) {
        const wait = err.retryAfter !== undefined ? err.retryAfter * 1000 : Math.min(500 * 2 ** attempt, this.#maxRetryDelayMs);
        if (wait <= this.#maxRetryDelayMs) {
          await sleep(wait, o.signal);
          continue;
        }
      }
      throw err;
    }
  }
}

function jsonl<T>(text: string): T[] {
  const out: T[] = [];
  for (const line of text.split("\n")) {
    if (line.trim() !== "") out.push(JSON.parse(line) as T);
  }
  return out;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export { MakerAPIError };
