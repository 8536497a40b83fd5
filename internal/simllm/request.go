package simllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/internal/llm"
)

// chatRequest is the part of a chat-completions body the sim reads; other
// fields are accepted and ignored.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Temperature         json.RawMessage `json:"temperature"` // raw: absent, null and a number differ
	Seed                *int64          `json:"seed"`
	N                   *int            `json:"n"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`

	// Derived by validate.
	temperatureSet bool    // the body has a temperature key
	temperature    float64 // 1 when absent or null
	n              int
	limit          int      // token limit, 0 for none
	stream         bool     // answer as server-sent events
	includeUsage   bool     // stream_options.include_usage: a last chunk with usage
	texts          []string // message contents
	msgHash        uint64   // hash of roles and contents
	promptTokens   int
	// prefixTokens and prefixHash are every message but the last: the
	// part a provider's prompt cache can serve again (cache.go).
	prefixTokens int
	prefixHash   uint64
	breakGlass   *bgPrompt    // set by chat for a break-glass prompt
	hint         *llm.SimHint // set by chat when the request carries one
}

type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"` // decoded in one pass: string, nil or []any
}

var validRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

func badRequest(param, code, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param, code: code, message: msg}
}

// decodeRequest parses body. A body that is a JSON object but has a field of
// the wrong type yields an error with logged set: the request was readable.
// The bodies clients send take the fast path (requestcodec.go); the rest,
// errors included, take encoding/json.
func decodeRequest(body []byte) (*chatRequest, *apiError) {
	if req, ok := decodeRequestFast(body); ok {
		return req, nil
	}
	return decodeRequestJSON(body)
}

// decodeRequestJSON is decodeRequest by encoding/json.
func decodeRequestJSON(body []byte) (*chatRequest, *apiError) {
	req := &chatRequest{}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return req, badRequest("", "", "We could not parse the JSON body of your request: it must be a JSON object. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.)")
	}
	if err := json.Unmarshal(body, req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			e := badRequest(typeErr.Field, "invalid_type", "Invalid type for '"+typeErr.Field+"': expected "+typeName(typeErr.Type.Kind().String())+", but got "+typeErr.Value+" instead.")
			e.logged = true
			var keys map[string]json.RawMessage
			_ = json.Unmarshal(body, &keys)
			_, req.temperatureSet = keys["temperature"]
			return req, e
		}
		return req, badRequest("", "", "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
	}
	req.temperatureSet = req.Temperature != nil
	return req, nil
}

func typeName(kind string) string {
	switch kind {
	case "int", "int64":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "struct":
		return "an object"
	}
	return "a " + kind
}

// validate checks the request as OpenAI would and fills the derived fields.
func (req *chatRequest) validate() *apiError {
	if req.Model == "" {
		return badRequest("model", "missing_required_parameter", "you must provide a model parameter")
	}
	if req.Messages == nil {
		return badRequest("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
	}
	if len(req.Messages) == 0 {
		return badRequest("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	req.stream = req.Stream != nil && *req.Stream
	if o := req.StreamOptions; o != nil {
		if !req.stream {
			return badRequest("stream_options", "invalid_value", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
		}
		req.includeUsage = o.IncludeUsage != nil && *o.IncludeUsage
	}

	req.temperature = 1
	if t := req.Temperature; t != nil && string(t) != "null" {
		v, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			return badRequest("temperature", "invalid_type", "Invalid type for 'temperature': expected a decimal, but got "+jsonKind(t)+" instead.")
		}
		switch {
		case v > 2:
			return badRequest("temperature", "decimal_above_max_value", "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got "+string(t)+" instead.")
		case v < 0:
			return badRequest("temperature", "decimal_below_min_value", "Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but got "+string(t)+" instead.")
		}
		req.temperature = v + 0 // -0 is 0: greedy, and the same seed
	}

	req.n = 1
	if req.N != nil {
		if e := intRange("n", *req.N, 1, MaxN); e != nil {
			return e
		}
		req.n = *req.N
	}
	for _, lim := range []struct {
		name string
		v    *int
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if lim.v == nil {
			continue
		}
		if e := intRange(lim.name, *lim.v, 1, MaxOutputTokens); e != nil {
			return e
		}
		if req.limit == 0 || *lim.v < req.limit {
			req.limit = *lim.v
		}
	}

	h := fnv.New64a()
	req.texts = make([]string, len(req.Messages))
	for i, m := range req.Messages {
		param := "messages[" + strconv.Itoa(i) + "]"
		if m.Role == "" {
			return badRequest(param+".role", "missing_required_parameter", "Missing required parameter: '"+param+".role'.")
		}
		if !validRoles[m.Role] {
			return badRequest(param+".role", "invalid_value", "Invalid value: '"+m.Role+"'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.")
		}
		text, ok := contentText(m.Content)
		if !ok {
			return badRequest(param+".content", "invalid_type", "Invalid type for '"+param+".content': expected one of a string or array of objects, but got "+anyKind(m.Content)+" instead.")
		}
		req.texts[i] = text
		if i == len(req.Messages)-1 {
			req.prefixTokens, req.prefixHash = req.promptTokens, h.Sum64()
		}
		req.promptTokens += tokenCount(text) + 4
		_, _ = h.Write([]byte(m.Role))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(text))
		_, _ = h.Write([]byte{0})
	}
	req.msgHash = h.Sum64()
	return nil
}

func intRange(name string, v, lo, hi int) *apiError {
	switch {
	case v < lo:
		return badRequest(name, "integer_below_min_value", "Invalid '"+name+"': integer below minimum value. Expected a value >= "+strconv.Itoa(lo)+", but got "+strconv.Itoa(v)+" instead.")
	case v > hi:
		return badRequest(name, "integer_above_max_value", "Invalid '"+name+"': integer above maximum value. Expected a value <= "+strconv.Itoa(hi)+", but got "+strconv.Itoa(v)+" instead.")
	}
	return nil
}

// contentText reads a message content: a string, null, or an array of
// parts whose "text" fields are joined by newlines.
func contentText(c any) (string, bool) {
	switch c := c.(type) {
	case string:
		return c, true
	case nil:
		return "", true
	case []any:
		var b strings.Builder
		for i, p := range c {
			part, ok := p.(map[string]any)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteByte('\n')
			}
			text, _ := part["text"].(string)
			b.WriteString(text)
		}
		return b.String(), true
	}
	return "", false
}

func anyKind(c any) string {
	switch c.(type) {
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "a string"
}

func jsonKind(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
