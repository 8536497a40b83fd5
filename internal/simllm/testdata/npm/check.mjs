// Drives internal/simllm with the official OpenAI Node client, to prove the
// sim speaks the real API. Run by TestOfficialOpenAINodeClient:
//
//   node check.mjs BASEURL [MESSAGES_JSON WANT_ANSWER]
//
// The server must be started with Accuracy 1, API key $SIM_API_KEY and
// Models ["sim-1"] (so it answers other models 404, as OpenAI does).
// WANT_ANSWER is the expected "move = ...\nnext_state = ..." tail.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [baseURL, messagesJSON, wantAnswer] = process.argv.slice(2);
if (!baseURL) {
  console.error('usage: node check.mjs BASEURL [MESSAGES_JSON WANT_ANSWER]');
  process.exit(2);
}
const apiKey = process.env.SIM_API_KEY ?? 'sk-sim';
const model = 'sim-1';
const messages = messagesJSON
  ? JSON.parse(messagesJSON)
  : [{ role: 'user', content: 'Say hello.' }];

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 20_000 });

// Models.
const ids = [];
for await (const m of client.models.list()) ids.push(m.id);
assert.deepEqual(ids, [model]);
const one = await client.models.retrieve(model);
assert.equal(one.object, 'model');
await assert.rejects(client.models.retrieve('no-such-model'),
  (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');

// A completion at temperature 0 with n=2, seed and max_tokens.
const { data: res, response } = await client.chat.completions
  .create({ model, messages, temperature: 0, n: 2, seed: 42, max_tokens: 300 })
  .withResponse();
assert.equal(response.status, 200);
assert.match(response.headers.get('x-request-id') ?? '', /^req_/);
assert.match(res.id, /^chatcmpl-/);
assert.equal(res.object, 'chat.completion');
assert.equal(typeof res.created, 'number');
assert.equal(res.model, model);
assert.match(res.system_fingerprint, /^fp_/);
assert.equal(res.choices.length, 2);
res.choices.forEach((c, i) => {
  assert.equal(c.index, i);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.equal(c.finish_reason, 'stop');
  assert.equal(c.logprobs, null);
  if (wantAnswer) assert.ok(c.message.content.endsWith(wantAnswer), `choice ${i}: ${c.message.content}`);
});
assert.equal(res.choices[0].message.content, res.choices[1].message.content,
  'temperature 0 decodes greedily: choices agree');
const u = res.usage;
assert.ok(u.prompt_tokens > 0 && u.completion_tokens > 0);
assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);

// The same request streamed with include_usage: a role chunk, content in
// several deltas, a finish_reason chunk per choice, then one chunk with no
// choices and the usage; the text and usage are the non-streamed ones.
const params = { model, messages, temperature: 0, n: 2, seed: 42, max_tokens: 300 };
const stream = await client.chat.completions.create(
  { ...params, stream: true, stream_options: { include_usage: true } });
const chunks = [];
for await (const chunk of stream) chunks.push(chunk);
const content = ['', ''];
const deltas = [0, 0];
const finish = [null, null];
const roles = [];
let usage = null;
for (const [i, ch] of chunks.entries()) {
  assert.equal(ch.object, 'chat.completion.chunk');
  assert.equal(ch.id, chunks[0].id);
  assert.equal(ch.model, model);
  assert.equal(usage, null, 'nothing after the usage chunk');
  if (ch.choices.length === 0) {
    usage = ch.usage;
    continue;
  }
  assert.equal(ch.usage, null, `chunk ${i}: usage null on every chunk with choices`);
  const c = ch.choices[0];
  if (c.delta.role) roles.push(c.index);
  if (c.delta.content) { content[c.index] += c.delta.content; deltas[c.index]++; }
  if (c.finish_reason) finish[c.index] = c.finish_reason;
}
assert.deepEqual(roles, [0, 1]);
assert.equal(chunks[0].choices[0].delta.role, 'assistant');
assert.deepEqual(finish, ['stop', 'stop']);
assert.ok(deltas[0] >= 2 && deltas[1] >= 2, `content in several deltas: ${deltas}`);
assert.deepEqual(content, res.choices.map((c) => c.message.content));
assert.deepEqual(usage, res.usage);

// On the wire: text/event-stream, "data: " events, ending "data: [DONE]".
const raw = await client.chat.completions
  .create({ ...params, stream: true, stream_options: { include_usage: true } })
  .asResponse();
assert.equal(raw.status, 200);
assert.match(raw.headers.get('content-type') ?? '', /^text\/event-stream/);
const text = await raw.text();
const events = text.split('\n\n');
assert.equal(events.pop(), '', 'the stream ends with a blank line');
assert.equal(events.at(-1), 'data: [DONE]');
assert.ok(events.every((e) => e.startsWith('data: ')), 'every event is one data line');
assert.equal(events.length, chunks.length + 1);

// The SDK's own stream helper accumulates the same completion.
const runner = client.chat.completions.stream({ ...params, stream_options: { include_usage: true } });
const final = await runner.finalChatCompletion();
assert.deepEqual(final.choices.map((c) => c.message.content), content);
assert.deepEqual(final.choices.map((c) => c.finish_reason), ['stop', 'stop']);
assert.equal(final.usage.total_tokens, res.usage.total_tokens);

// An unknown model: 404 NotFoundError with OpenAI's code, streamed or not.
const notFound = (e) => e instanceof OpenAI.NotFoundError && e.status === 404 &&
  e.code === 'model_not_found' && e.type === 'invalid_request_error' &&
  e.message.includes('The model `gpt-9` does not exist or you do not have access to it.');
await assert.rejects(client.chat.completions.create({ model: 'gpt-9', messages }), notFound);
await assert.rejects(
  client.chat.completions.create({ model: 'gpt-9', messages, stream: true }), notFound);

// A forced 429 without retries surfaces as RateLimitError.
await assert.rejects(
  client.chat.completions.create({ model, messages, temperature: 0.1, seed: 1 },
    { headers: { 'X-Sim-Fault': 'rate_limit' } }),
  (e) => e instanceof OpenAI.RateLimitError && e.status === 429 &&
    e.code === 'rate_limit_exceeded' && e.type === 'requests' &&
    e.headers.get('retry-after') === '1' && e.headers.get('retry-after-ms') !== null);

// With retries the client sits out retry-after-ms and succeeds on the third try.
const retrying = new OpenAI({ baseURL, apiKey, maxRetries: 3, timeout: 20_000 });
const after = await retrying.chat.completions.create(
  { model, messages, temperature: 0.1, seed: 2 },
  { headers: { 'X-Sim-Fault': 'rate_limit; times=2' } });
assert.equal(after.choices.length, 1);

// A forced 500.
await assert.rejects(
  client.chat.completions.create({ model, messages }, { headers: { 'X-Sim-Fault': 'server_error' } }),
  (e) => e instanceof OpenAI.InternalServerError && e.status === 500 && e.type === 'server_error');

// Validation errors come back as BadRequestError with param and code.
await assert.rejects(client.chat.completions.create({ model, messages, n: 17 }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'n' && e.code === 'integer_above_max_value');

// A wrong key.
const stranger = new OpenAI({ baseURL, apiKey: 'sk-wrong-key-0000', maxRetries: 0 });
await assert.rejects(stranger.models.list(),
  (e) => e instanceof OpenAI.AuthenticationError && e.code === 'invalid_api_key');

console.log('ok');
