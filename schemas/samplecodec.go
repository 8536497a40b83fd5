package schemas

import (
	"encoding/json"
	"time"
)

// The sample messages are the fleet's hot path, one request and one result
// a model call: they are read and written by codecs (codec.go) rather than
// by reflection. A field added to SampleRequest, SampleMember,
// SampleResult, ResultMember or Header goes in its list below too, in the struct's
// order, with the struct's json tag (TestCodecFields fails until it is).

var sampleRequestCodec = newCodec(
	field("version", func(r *SampleRequest) *int { return &r.Version }),
	field("kind", func(r *SampleRequest) *string { return &r.Kind }),
	field("tenant", func(r *SampleRequest) *string { return &r.Tenant }),
	field("job_id", func(r *SampleRequest) *string { return &r.JobID }),
	field("sample_id", func(r *SampleRequest) *string { return &r.SampleID }),
	field("step", func(r *SampleRequest) *int64 { return &r.Step }),
	field("epoch", func(r *SampleRequest) *int64 { return &r.Epoch }),
	field("index", func(r *SampleRequest) *int { return &r.Index }),
	field("attempt", func(r *SampleRequest) *int { return &r.Attempt }),
	field("branch,omitempty", func(r *SampleRequest) *int64 { return &r.Branch }),
	field("task", func(r *SampleRequest) *string { return &r.Task }),
	field("task_version,omitempty", func(r *SampleRequest) *string { return &r.TaskVersion }),
	field("task_hash,omitempty", func(r *SampleRequest) *string { return &r.TaskHash }),
	field("params", func(r *SampleRequest) *json.RawMessage { return &r.Params }),
	field("params_ref,omitempty", func(r *SampleRequest) *string { return &r.ParamsRef }),
	field("state", func(r *SampleRequest) *json.RawMessage { return &r.State }),
	field("temperature", func(r *SampleRequest) *float64 { return &r.Temperature }),
	field("seed", func(r *SampleRequest) *int64 { return &r.Seed }),
	field("max_output_tokens", func(r *SampleRequest) *int { return &r.MaxOutputTokens }),
	field("model,omitempty", func(r *SampleRequest) *string { return &r.Model }),
	field("prompt_variant,omitempty", func(r *SampleRequest) *int { return &r.PromptVariant }),
	field("token", func(r *SampleRequest) *string { return &r.Token }),
	field("issued_at", func(r *SampleRequest) *time.Time { return &r.IssuedAt }),
	list("also,omitempty", func(r *SampleRequest) *[]SampleMember { return &r.Also }, sampleMemberCodec),
)

var sampleMemberCodec = newCodec(
	field("index", func(m *SampleMember) *int { return &m.Index }),
	field("seed", func(m *SampleMember) *int64 { return &m.Seed }),
	field("token", func(m *SampleMember) *string { return &m.Token }),
	field("temperature,omitempty", func(m *SampleMember) *float64 { return &m.Temperature }),
)

var sampleResultCodec = newCodec(
	field("version", func(r *SampleResult) *int { return &r.Version }),
	field("kind", func(r *SampleResult) *string { return &r.Kind }),
	field("tenant", func(r *SampleResult) *string { return &r.Tenant }),
	field("job_id", func(r *SampleResult) *string { return &r.JobID }),
	field("sample_id", func(r *SampleResult) *string { return &r.SampleID }),
	field("step", func(r *SampleResult) *int64 { return &r.Step }),
	field("epoch", func(r *SampleResult) *int64 { return &r.Epoch }),
	field("index", func(r *SampleResult) *int { return &r.Index }),
	field("attempt", func(r *SampleResult) *int { return &r.Attempt }),
	field("branch,omitempty", func(r *SampleResult) *int64 { return &r.Branch }),
	field("outcome", func(r *SampleResult) *string { return &r.Outcome }),
	field("vote_key,omitempty", func(r *SampleResult) *string { return &r.VoteKey }),
	field("red_flag,omitempty", func(r *SampleResult) *string { return &r.RedFlag }),
	field("detail,omitempty", func(r *SampleResult) *string { return &r.Detail }),
	field("cause,omitempty", func(r *SampleResult) *string { return &r.Cause }),
	field("finish_reason,omitempty", func(r *SampleResult) *string { return &r.FinishReason }),
	field("prompt_tokens", func(r *SampleResult) *int { return &r.PromptTokens }),
	field("completion_tokens", func(r *SampleResult) *int { return &r.CompletionTokens }),
	field("cached_prompt_tokens,omitempty", func(r *SampleResult) *int { return &r.CachedPromptTokens }),
	field("latency_ms", func(r *SampleResult) *float64 { return &r.LatencyMS }),
	field("model,omitempty", func(r *SampleResult) *string { return &r.Model }),
	field("voter_id", func(r *SampleResult) *string { return &r.VoterID }),
	field("token,omitempty", func(r *SampleResult) *string { return &r.Token }),
	list("also,omitempty", func(r *SampleResult) *[]ResultMember { return &r.Also }, resultMemberCodec),
)

var resultMemberCodec = newCodec(
	field("index", func(m *ResultMember) *int { return &m.Index }),
	field("outcome", func(m *ResultMember) *string { return &m.Outcome }),
	field("vote_key,omitempty", func(m *ResultMember) *string { return &m.VoteKey }),
	field("red_flag,omitempty", func(m *ResultMember) *string { return &m.RedFlag }),
	field("detail,omitempty", func(m *ResultMember) *string { return &m.Detail }),
	field("finish_reason,omitempty", func(m *ResultMember) *string { return &m.FinishReason }),
	field("prompt_tokens", func(m *ResultMember) *int { return &m.PromptTokens }),
	field("completion_tokens", func(m *ResultMember) *int { return &m.CompletionTokens }),
	field("cached_prompt_tokens,omitempty", func(m *ResultMember) *int { return &m.CachedPromptTokens }),
	field("latency_ms", func(m *ResultMember) *float64 { return &m.LatencyMS }),
	field("token,omitempty", func(m *ResultMember) *string { return &m.Token }),
)

// AppendSampleRequest appends r's JSON to dst, byte for byte what
// json.Marshal(r) writes, and returns the extended slice; on an error
// (what json.Marshal refuses: a temperature that is NaN or infinite,
// params or state that are not JSON, a time outside years 0-9999) dst is
// returned as it was. Unlike Encode it does not validate r. A caller that
// keeps dst for the next message writes without allocating.
func AppendSampleRequest(dst []byte, r *SampleRequest) ([]byte, error) {
	return sampleRequestCodec.appendTo(dst, r)
}

// AppendSampleResult appends r's JSON to dst, as AppendSampleRequest.
func AppendSampleResult(dst []byte, r *SampleResult) ([]byte, error) {
	return sampleResultCodec.appendTo(dst, r)
}
