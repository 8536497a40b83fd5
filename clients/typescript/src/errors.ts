import type { FieldError, Problem } from "./openapi.js";

/** PROBLEM_BASE starts every problem type URI the API sends (docs/api.md lists them). */
export const PROBLEM_BASE = "https://makerfleet.dev/problems/";

/**
 * MakerAPIError is an error answer of the API: its RFC 9457 problem
 * details (application/problem+json), or, from a server or proxy that
 * sends none, a problem made of the HTTP status.
 */
export class MakerAPIError extends Error {
  /** type is the problem type URI, e.g. https://makerfleet.dev/problems/not-found ("about:blank" when the answer had no problem). */
  readonly type: string;
  /** title is the problem type's short summary. */
  readonly title: string;
  /** status is the HTTP status code. */
  readonly status: number;
  /** detail explains this occurrence. */
  readonly detail: string | undefined;
  /** instance is the request's path. */
  readonly instance: string | undefined;
  /** errors name the failing fields of an invalid request (JSON pointers, e.g. "/params/disks"). */
  readonly errors: FieldError[];
  /** state is the job's state when the problem is that it has not finished (409 not-finished). */
  readonly state: string | undefined;
  /** retryAfter is the Retry-After header's wait in seconds (429, 503), else undefined. */
  readonly retryAfter: number | undefined;
  /** problem is the problem document as sent, with any member this client does not name. */
  readonly problem: Problem & Record<string, unknown>;

  constructor(problem: Problem & Record<string, unknown>, retryAfter?: number) {
    super(message(problem));
    this.name = "MakerAPIError";
    this.problem = problem;
    this.type = problem.type;
    this.title = problem.title;
    this.status = problem.status;
    this.detail = problem.detail;
    this.instance = problem.instance;
    this.errors = problem.errors ?? [];
    this.state = problem.state;
    this.retryAfter = retryAfter;
  }

  /** kind is the last part of the type URI: "not-found", "invalid-request", "rate-limited"... */
  get kind(): string {
    return this.type.slice(this.type.lastIndexOf("/") + 1);
  }
}

function message(p: Problem): string {
  let s = `${p.status} ${p.title}`;
  if (p.detail) s += `: ${p.detail}`;
  for (const f of p.errors ?? []) {
    if (f.message !== p.detail) s += `; ${f.path || "/"}: ${f.message}`;
  }
  return s;
}

/** maxErrorBody bounds how much of an error answer is kept. */
const maxErrorBody = 1 << 20;

/** problemOf reads an error answer into a MakerAPIError. */
export async function problemOf(res: Response): Promise<MakerAPIError> {
  const retryAfter = parseRetryAfter(res.headers.get("retry-after"));
  let text = "";
  try {
    text = (await res.text()).slice(0, maxErrorBody);
  } catch {
    // The status is enough.
  }
  const ctype = (res.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (ctype === "application/problem+json" || ctype === "application/json") {
    try {
      const p: unknown = JSON.parse(text);
      if (isProblem(p)) return new MakerAPIError(p, retryAfter);
    } catch {
      // Not a problem: made of the status below.
    }
  }
  const p: Problem & Record<string, unknown> = {
    type: "about:blank",
    title: res.statusText || `HTTP ${res.status}`,
    status: res.status,
  };
  const d = text.trim();
  if (d) p.detail = d.length > 300 ? d.slice(0, 300) + "…" : d;
  return new MakerAPIError(p, retryAfter);
}

function isProblem(p: unknown): p is Problem & Record<string, unknown> {
  if (typeof p !== "object" || p === null) return false;
  const o = p as Record<string, unknown>;
  return typeof o.status === "number" && o.status !== 0 && typeof o.type === "string" && typeof o.title === "string";
}

/** parseRetryAfter reads Retry-After: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(v: string | null): number | undefined {
  if (v === null) return undefined;
  const s = v.trim();
  if (/^\d+$/.test(s)) return Number(s);
  const at = Date.parse(s);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, Math.ceil((at - Date.now()) / 1000));
}
