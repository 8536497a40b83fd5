// Package llm is the model client that voters (and the judge) use to call an
// OpenAI-compatible chat-completions server once per sample.
//
// It wraps github.com/sashabaranov/go-openai and adds what MAKER voting needs:
//
//   - Temperature reaches the server exactly as given, including 0. go-openai
//     holds temperature as a float32 with omitempty, so 0 would be dropped
//     (servers then apply their default, often 1.0) and 0.1 would be sent as
//     0.10000000149011612. The package's HTTP doer writes the float64 from the
//     Request into the JSON body of every chat-completions call.
//   - Bounded retries with capped exponential full-jitter backoff, honouring
//     Retry-After (seconds or HTTP-date) and retry-after-ms.
//   - Errors that decide a message's fate: ErrPermanent (Term), ErrRetryLater
//     and ErrQuota (NakWithDelay for RetryLaterError.Delay; pause, do not
//     fail, a run), ErrRetryBudget (Nak with the caller's own delay),
//     ErrBadResponse (the server keeps answering 2xx with something that is
//     not a usable completion: the voter's red flag "empty"). See errors.go
//     for the full table.
//   - Config.Stream asks for streamed replies ("stream": true with
//     stream_options.include_usage) and joins the chunks into the same
//     Response (stream.go), so red flags and retries do not change.
//   - A reply is used only when it is whole: at least one choice, and usage
//     figures in [0, MaxUsageTokens], so a broken or lying server cannot
//     lower or blow up what a job costs.
//
// A Client is safe for concurrent use by hundreds of goroutines.
package llm
