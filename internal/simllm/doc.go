// Package simllm is a simulated OpenAI-compatible chat-completions model for
// the demo, tests and benchmarks. It answers the Towers of Hanoi step prompts
// of task/hanoi with a tunable error rate, red-flag-worthy replies and
// transport faults, so the whole MAKER pipeline (sampling, red-flagging,
// first-to-ahead-by-k voting, retries) can run without a real model.
//
// # Endpoints
//
//	POST /v1/chat/completions  the model, streamed with "stream": true
//	GET  /v1/models            lists Config.Model, then Config.Models
//	GET  /v1/models/{id}       a listed model, else 404 model_not_found
//	GET  /sim/stats            Stats as JSON (no API key needed)
//
// Responses and errors follow the OpenAI shapes; errors are
// {"error":{"message","type","param","code"}}.
//
// # Models
//
// With Config.Models empty any model name is answered (tests name models
// freely). With Models set, the served names are Model and Models: a chat
// request for another gets 404 with OpenAI's body, {"error":{"message":
// "The model `x` does not exist or you do not have access to it.","type":
// "invalid_request_error","param":null,"code":"model_not_found"}}, counted
// in Stats.UnknownModels; "*" (AnyModel) in Models serves every name. The
// name checked is the one before any "@fault" suffix (breakglass.go).
// `maker simllm` always sets Models (its --model flag).
//
// # Streaming
//
// A request with "stream": true gets the same answer as server-sent events
// (Content-Type text/event-stream), as OpenAI sends them (stream.go):
// "data: {chat.completion.chunk}" events, per choice a first chunk with
// role "assistant", the content in deltas of at most 24 bytes and a chunk
// with the finish_reason ("length" for a reply cut at the limit); with
// stream_options.include_usage every chunk carries "usage": null and a last
// chunk with "choices": [] carries the usage; then "data: [DONE]".
// stream_options without stream true is a 400. Faults (429, 500, a
// break-glass model's @fail) and errors come before the stream as plain
// HTTP errors; latency delays the first byte. A seeded request streams the
// content it gets without streaming; a seedless one hashes its body, which
// holds "stream", so its content may differ.
//
// # What the model sees
//
// Like a real model it reads only message text. It recognises a Hanoi step
// prompt by "Towers of Hanoi with N disks", the cycle "0 -> 1 -> 2 -> 0" or
// "0 -> 2 -> 1 -> 0", "Previous move: none" or "Previous move: move = [d, f, t]"
// and "Current state: [[...], [...], [...]]". It follows the cycle the prompt
// states, even a wrong one. It also answers the break-glass panel and judge
// prompts of package judge with the JSON they ask for (see breakglass.go,
// which also lists the model-name suffixes that make a panel member fail,
// stall or answer badly). Anything else gets a polite prose reply with no
// answer lines (counted unrecognized).
//
// # Answers
//
// Each choice draws an outcome: overlong with Config.OverlongRate (the reply
// runs to the token limit, finish_reason "length"), malformed with
// Config.MalformedRate (fails hanoi.ParseAnswer: no next_state line, a move of
// two numbers, two pegs, a disk twice, a missing disk, a move in parentheses,
// prose only), otherwise a valid answer that is right with probability
//
//	p_eff = 0.5 + (A − 0.5) · (1 − min(1, S · max(0, T − 0.1)))   when A > 0.5
//	p_eff = A                                                      when A ≤ 0.5
//
// where A is Config.Accuracy, S is Config.TemperatureSensitivity (negative:
// p_eff = A) and T the request temperature; a request without temperature
// uses T = 1, OpenAI's default, so a client that drops temperature 0 gets
// visibly worse answers (A = 0.95, S = 0.5: p_eff = 0.7475). A wrong answer
// is well formed and parses: another legal move with its true next state;
// the right move with the disk on the wrong peg, at the bottom of the target
// peg, or with the unchanged state; or the reversed move with the right state.
// Wrong votes thus spread over several candidates.
//
// # Determinism
//
// A choice's content is a pure function of Config.Seed, the request's seed,
// the choice index, the messages' text and the temperature. A request without
// seed uses a hash of its body instead. At temperature 0 the model decodes
// greedily: the request seed and the choice index are ignored, so every
// choice and every repeat of the prompt gets the same answer (a realistic
// source of correlated errors: a client must not sample every vote at T=0).
// Arrival order, concurrency and retries never change content; only the
// transport faults and latency jitter come from a shared, seeded RNG.
//
// # Tokens
//
// prompt_tokens = Σ (ceil(len(content)/4) + 4) over messages; a choice costs
// ceil(len(content)/4). The limit is the smaller of max_tokens and
// max_completion_tokens; a reply longer than the limit is cut there with
// finish_reason "length" (counted overlong). Without a limit an overlong
// reply runs to OverlongTokens.
//
// # Forcing faults
//
// A request header forces a transport fault, for tests of retry paths:
//
//	X-Sim-Fault: rate_limit            every such request gets 429
//	X-Sim-Fault: server_error          every such request gets 500
//	X-Sim-Fault: rate_limit; times=2   the first 2 arrivals of this exact body
//	                                   (with this header) get 429, later ones
//	                                   are answered: a retrying client succeeds
//
// A 429 carries Retry-After in whole seconds (rounded up) and retry-after-ms,
// which the official OpenAI SDKs honour.
package simllm
