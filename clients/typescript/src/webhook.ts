/**
 * Webhook verification: the Standard Webhooks scheme
 * (https://www.standardwebhooks.com). A delivery carries the headers
 * webhook-id, webhook-timestamp (Unix seconds) and webhook-signature: one
 * or more space-separated "v1,<base64 HMAC-SHA256 of
 * "<id>.<timestamp>.<body>">", keyed with the secret's bytes (the base64
 * after "whsec_").
 */

/** WebhookVerificationError says why a delivery was refused. */
export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

/** Headers as a fetch Headers, or a plain object such as Node's IncomingHttpHeaders. */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

/** VerifyOptions configure verifyWebhook. */
export interface VerifyOptions {
  /** toleranceSeconds is how far webhook-timestamp may be from now, either way. Default 300. */
  toleranceSeconds?: number;
  /** now is the current time in Unix seconds (for tests). Default the clock. */
  now?: number;
}

const maxSignatures = 16;

/**
 * verifyWebhook checks a delivery: its signature (any one of those the
 * header lists, compared in constant time) over the exact body received,
 * and its timestamp within the tolerance (so a replayed old delivery is
 * refused). It returns the body parsed as JSON; a delivery that fails a
 * check throws a WebhookVerificationError. Pass the raw body, before any
 * JSON parsing.
 */
export async function verifyWebhook(
  secret: string,
  headers: WebhookHeaders,
  body: string | Uint8Array,
  opts: VerifyOptions = {},
): Promise<unknown> {
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const sigs = header(headers, "webhook-signature");
  if (!id || !ts || !sigs) throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature");
  if (!/^\d{1,15}$/.test(ts)) throw new WebhookVerificationError("webhook-timestamp is not Unix seconds");
  const tolerance = opts.toleranceSeconds ?? 300;
  const now = opts.now ?? Math.floor(Date.now() / 1000);
  const at = Number(ts);
  if (at < now - tolerance) throw new WebhookVerificationError("webhook-timestamp is too old");
  if (at > now + tolerance) throw new WebhookVerificationError("webhook-timestamp is in the future");

  const raw = typeof body === "string" ? new TextEncoder().encode(body) : body;
  const expected = await sign(secretKey(secret), id, ts, raw);
  const list = sigs.split(" ").filter((s) => s !== "");
  if (list.length > maxSignatures) throw new WebhookVerificationError("too many signatures");
  let ok = false;
  for (const s of list) {
    const comma = s.indexOf(",");
    if (comma < 0 || s.slice(0, comma) !== "v1") continue;
    let got: Uint8Array;
    try {
      got = fromBase64(s.slice(comma + 1));
    } catch {
      continue;
    }
    // Every listed signature is compared (no early exit).
    ok = equal(got, expected) || ok;
  }
  if (!ok) throw new WebhookVerificationError("no matching signature");
  try {
    return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw)) as unknown;
  } catch {
    throw new WebhookVerificationError("the body is not JSON");
  }
}

/**
 * signWebhook returns the webhook-signature value ("v1,<base64>") of a
 * delivery: what a sender computes, and what a test of a receiver needs.
 */
export async function signWebhook(secret: string, id: string, timestamp: number | string, body: string | Uint8Array): Promise<string> {
  const raw = typeof body === "string" ? new TextEncoder().encode(body) : body;
  return "v1," + toBase64(await sign(secretKey(secret), id, String(timestamp), raw));
}

function secretKey(secret: string): Uint8Array {
  const b64 = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  let key: Uint8Array;
  try {
    key = fromBase64(b64);
  } catch {
    throw new WebhookVerificationError("the secret is not whsec_<base64>");
  }
  if (key.length === 0) throw new WebhookVerificationError("the secret is empty");
  return key;
}

async function sign(key: Uint8Array, id: string, ts: string, body: Uint8Array): Promise<Uint8Array> {
  const prefix = new TextEncoder().encode(`${id}.${ts}.`);
  const msg = new Uint8Array(prefix.length + body.length);
  msg.set(prefix);
  msg.set(body, prefix.length);
  const k = await crypto.subtle.importKey("raw", new Uint8Array(key), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", k, msg));
}

/** equal compares in time that depends only on the lengths. */
function equal(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i]! ^ b[i]!;
  return d === 0;
}

function header(h: WebhookHeaders, name: string): string | undefined {
  if (typeof (h as Headers).get === "function") return (h as Headers).get(name) ?? undefined;
  const rec = h as Record<string, string | string[] | undefined>;
  for (const [k, v] of Object.entries(rec)) {
    if (k.toLowerCase() === name) return Array.isArray(v) ? v.join(" ") : v;
  }
  return undefined;
}

function fromBase64(s: string): Uint8Array {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) throw new Error("not base64");
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function toBase64(b: Uint8Array): string {
  let s = "";
  for (const x of b) s += String.fromCharCode(x);
  return btoa(s);
}
