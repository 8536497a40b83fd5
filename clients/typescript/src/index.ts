/**
 * @makerfleet/client: a client of the makerfleet API (maker serve). Jobs,
 * event streams, batches, tasks, usage and dead letters; error answers as
 * MakerAPIError (RFC 9457 problems); the webhook signing secret and
 * deliveries, and Standard Webhooks verification. Its
 * types are generated from the API's OpenAPI document (openapi.ts).
 */
export { MakerClient, TERMINAL_STATES } from "./client.js";
export type {
  BatchLine,
  BatchOptions,
  CallOptions,
  ClientOptions,
  JobEvent,
  ListJobsOptions,
  ListWebhookDeliveriesOptions,
  WaitOptions,
} from "./client.js";
export { MakerAPIError, PROBLEM_BASE, parseRetryAfter } from "./errors.js";
export { parseSSE } from "./sse.js";
export type { ServerSentEvent } from "./sse.js";
export { signWebhook, verifyWebhook, WebhookVerificationError } from "./webhook.js";
export type { VerifyOptions, WebhookHeaders } from "./webhook.js";
export type * from "./openapi.js";
