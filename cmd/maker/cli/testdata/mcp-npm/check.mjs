// Drives `maker mcp` with the official MCP TypeScript SDK client over
// stdio (run by TestMCPOfficialClients). Environment: MAKER_BIN (the
// binary), MAKER_NATS_URL, MCP_ROOT (the server's --root, holding main.go
// and .env), MCP_TIMEOUT_MS (a request timeout shorter than one call).
// Prints one JSON line with what the Go test checks; exits 1 on a failed
// check.
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";

const timeout = Number(process.env.MCP_TIMEOUT_MS);
const transport = new StdioClientTransport({
  command: process.env.MAKER_BIN,
  args: ["mcp", "--root", process.env.MCP_ROOT, "--tenant", "acme", "--requester", "ts-sdk", "--progress-interval", "200ms"],
  env: { ...process.env },
  stderr: "inherit",
});
const client = new Client({ name: "makerfleet-check", version: "1" });
await client.connect(transport);

// Every input schema is plain: no type unions, no null, at any depth.
function assertPlain(schema, path) {
  if (Array.isArray(schema)) {
    schema.forEach((s, i) => assertPlain(s, `${path}[${i}]`));
    return;
  }
  if (schema === null || typeof schema !== "object") return;
  assert.ok(!Array.isArray(schema.type), `${path}.type is a union: ${JSON.stringify(schema.type)}`);
  assert.notEqual(schema.type, "null", `${path}.type is null`);
  for (const [k, v] of Object.entries(schema)) assertPlain(v, `${path}.${k}`);
}

const { tools } = await client.listTools();
assert.deepEqual(tools.map((t) => t.name).sort(), ["break_glass", "job_result", "job_status", "submit_job"]);
for (const t of tools) {
  assertPlain(t.inputSchema, `${t.name}.inputSchema`);
  assert.equal(t.outputSchema?.type, "object", `${t.name} has no object outputSchema`);
}
const bg = tools.find((t) => t.name === "break_glass").inputSchema.properties;
assert.equal(bg.tried.type, "object");
assert.equal(bg.context_files.type, "array");
assert.equal(bg.context_files.items.type, "string");
assert.equal(bg.request_id.type, "string");

const args = (id, session) => ({
  problem: "break glass: main panics with boom",
  context_files: ["main.go", ".env"],
  problem_type: "code_bug",
  budget: 0.5,
  tried: { local_model: "qwen: no", frontier_model: "opus: no", tools: "go vet: nothing" },
  session,
  request_id: id,
});

// The call outlasts the timeout: without progress it dies.
let timedOut = false;
try {
  await client.callTool({ name: "break_glass", arguments: args("ts-timeout", "ts-a") }, undefined, { timeout });
} catch (e) {
  timedOut = e instanceof McpError && e.code === ErrorCode.RequestTimeout;
  if (!timedOut) throw e;
}
assert.ok(timedOut, "the call did not time out without progress: make the panel slower");

// With progress resetting the timeout it lives to its answer.
const progress = [];
const started = Date.now();
const res = await client.callTool({ name: "break_glass", arguments: args("ts-1", "ts-b") }, undefined, {
  timeout,
  resetTimeoutOnProgress: true,
  maxTotalTimeout: 120000,
  onprogress: (p) => progress.push(p),
});
const elapsed = Date.now() - started;
assert.ok(!res.isError, `tool error: ${JSON.stringify(res.content)}`);
assert.equal(res.content.length, 1);
assert.equal(res.content[0].type, "text");
const parsed = JSON.parse(res.content[0].text);
assert.deepEqual(parsed, res.structuredContent);
assert.equal(parsed.outcome, "answered");
assert.equal(parsed.request_id, "ts-1");
assert.deepEqual(parsed.excluded_files.map((f) => f.path), [".env"]);
assert.ok(elapsed > timeout, `the call took ${elapsed} ms, not over the ${timeout} ms timeout`);
assert.ok(progress.length >= 2, `progress notifications: ${progress.length}`);
for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress, "progress does not increase");

// A retry with the same request id: the first answer, not a new call.
const again = await client.callTool({ name: "break_glass", arguments: args("ts-1", "ts-b") }, undefined, { timeout: 60000 });
assert.deepEqual(again.structuredContent, res.structuredContent);

// An unknown job is a tool error, not a protocol error.
const status = await client.callTool({ name: "job_status", arguments: { job_id: "nope" } });
assert.ok(status.isError);

await client.close();
console.log(JSON.stringify({ ok: true, progress: progress.length, elapsed_ms: elapsed, message: progress.at(-1)?.message }));
