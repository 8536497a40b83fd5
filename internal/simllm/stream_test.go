package simllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// streamChunk is one chat.completion.chunk as a client decodes it.
type streamChunk struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	ServiceTier       string `json:"service_tier"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []struct {
		Index int `json:"index"`
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"` // absent, null or an object
	raw   []byte
}

// streamed is a parsed event stream, checked for the shape every stream
// must have (see parseStream).
type streamed struct {
	chunks   []streamChunk
	contents []string // per choice, the deltas joined
	deltas   []int    // per choice, how many content deltas
	finish   []string // per choice
	usage    *chatResponse
}

// parseStream reads an SSE body as a strict client would and checks: every
// event is "data: ..." followed by a blank line; the last is [DONE]; every
// chunk is a chat.completion.chunk with the first chunk's id, created and
// model; each choice starts with a role chunk, has content deltas, and ends
// with exactly one finish_reason; "usage" is on every chunk (null) or on
// none; a usage chunk, if any, is last and has no choices.
func parseStream(body []byte) (*streamed, error) {
	events := strings.Split(string(body), "\n\n")
	if len(events) < 2 || events[len(events)-1] != "" {
		return nil, errors.New("the stream does not end with a blank line")
	}
	events = events[:len(events)-1]
	if events[len(events)-1] != "data: [DONE]" {
		return nil, fmt.Errorf("last event %q, want data: [DONE]", events[len(events)-1])
	}
	st := &streamed{}
	started := map[int]bool{}
	for i, ev := range events[:len(events)-1] {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			return nil, fmt.Errorf("event %d %q is not one data line", i, ev)
		}
		var c streamChunk
		dec := json.NewDecoder(strings.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("event %d: %w: %s", i, err, data)
		}
		c.raw = []byte(data)
		first := st.chunks
		st.chunks = append(st.chunks, c)
		if c.Object != "chat.completion.chunk" || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Created == 0 || !strings.HasPrefix(c.SystemFingerprint, "fp_") {
			return nil, fmt.Errorf("event %d: bad header: %s", i, data)
		}
		if len(first) > 0 && (c.ID != first[0].ID || c.Created != first[0].Created || c.Model != first[0].Model) {
			return nil, fmt.Errorf("event %d: id, created or model changed", i)
		}
		hasUsage := bytes.Contains(c.raw, []byte(`"usage":`))
		if len(first) > 0 && hasUsage != bytes.Contains(first[0].raw, []byte(`"usage":`)) {
			return nil, fmt.Errorf("event %d: usage on some chunks only", i)
		}
		if st.usage != nil {
			return nil, fmt.Errorf("event %d after the usage chunk", i)
		}
		if len(c.Choices) == 0 {
			if !hasUsage || string(c.Usage) == "null" {
				return nil, fmt.Errorf("event %d: no choices and no usage", i)
			}
			st.usage = &chatResponse{}
			if err := json.Unmarshal(data2usage(c.Usage), st.usage); err != nil {
				return nil, fmt.Errorf("event %d: usage: %w", i, err)
			}
			continue
		}
		if hasUsage && string(c.Usage) != "null" {
			return nil, fmt.Errorf("event %d: usage on a chunk with choices", i)
		}
		if len(c.Choices) != 1 {
			return nil, fmt.Errorf("event %d: %d choices in one chunk", i, len(c.Choices))
		}
		ch := c.Choices[0]
		for len(st.contents) <= ch.Index {
			st.contents, st.deltas, st.finish = append(st.contents, ""), append(st.deltas, 0), append(st.finish, "")
		}
		switch {
		case !started[ch.Index]:
			if ch.Delta.Role != "assistant" || ch.FinishReason != nil {
				return nil, fmt.Errorf("event %d: choice %d does not start with the role", i, ch.Index)
			}
			started[ch.Index] = true
		case st.finish[ch.Index] != "":
			return nil, fmt.Errorf("event %d: choice %d after its finish_reason", i, ch.Index)
		case ch.Delta.Role != "":
			return nil, fmt.Errorf("event %d: role again", i)
		case ch.FinishReason != nil:
			if ch.Delta.Content != nil {
				return nil, fmt.Errorf("event %d: content with the finish_reason", i)
			}
			st.finish[ch.Index] = *ch.FinishReason
		case ch.Delta.Content == nil || *ch.Delta.Content == "":
			return nil, fmt.Errorf("event %d: empty delta", i)
		default:
			st.contents[ch.Index] += *ch.Delta.Content
			st.deltas[ch.Index]++
		}
	}
	for i, f := range st.finish {
		if f == "" {
			return nil, fmt.Errorf("choice %d has no finish_reason", i)
		}
	}
	return st, nil
}

// data2usage wraps a usage object so chatResponse decodes it.
func data2usage(u json.RawMessage) []byte { return append(append([]byte(`{"usage":`), u...), '}') }

func TestNextDelta(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"short", "move = [1, 0, 2]", []string{"move = [1, 0, 2]"}},
		{"exactly one delta", strings.Repeat("x", deltaBytes), []string{strings.Repeat("x", deltaBytes)}},
		{"cut after a space", "move = [1, 0, 2]\nnext_state = [[3, 2], [], [1]]",
			[]string{"move = [1, 0, 2]\n", "next_state = [[3, 2], ", "[], [1]]"}},
		{"no space", strings.Repeat("x", 30), []string{strings.Repeat("x", deltaBytes), "xxxxxx"}},
		{"space too early", "ab " + strings.Repeat("x", 30), []string{"ab " + strings.Repeat("x", deltaBytes-3), "xxxxxxxxx"}},
		{"rune not split", strings.Repeat("x", 23) + "é" + "abc", []string{strings.Repeat("x", 23), "éabc"}},
		{"rune ends the window", strings.Repeat("x", 22) + "é" + "abc", []string{strings.Repeat("x", 22) + "é", "abc"}},
		{"three-byte rune", strings.Repeat("x", 23) + "→yz", []string{strings.Repeat("x", 23), "→yz"}},
	}
	for _, tt := range tests {
		var got []string
		for rest := tt.in; rest != ""; {
			n := nextDelta(rest)
			got = append(got, rest[:n])
			rest = rest[n:]
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) || len(got) != len(tt.want) {
			t.Errorf("%s: deltas %q, want %q", tt.name, got, tt.want)
		}
	}
}

// FuzzNextDelta: the deltas of any text join to it, each holds 1 to
// deltaBytes bytes, and valid UTF-8 is never cut inside a rune.
func FuzzNextDelta(f *testing.F) {
	for _, s := range []string{"", "a b", strings.Repeat("é", 40), strings.Repeat("ab\n", 20), "\xff\xfe" + strings.Repeat("€", 12)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var joined strings.Builder
		for rest := s; rest != ""; {
			n := nextDelta(rest)
			if n < 1 || n > deltaBytes {
				t.Fatalf("delta of %d bytes from %q", n, rest)
			}
			if utf8.ValidString(s) && !utf8.ValidString(rest[:n]) {
				t.Fatalf("delta %q cuts a rune", rest[:n])
			}
			joined.WriteString(rest[:n])
			rest = rest[n:]
		}
		if joined.String() != s {
			t.Fatalf("deltas join to %q, want %q", joined.String(), s)
		}
	})
}

// FuzzStreamWriter: whatever the choices hold (any content, finish reason
// and count), the writer's bytes parse as a stream whose contents,
// finish reasons and usage are the ones written.
func FuzzStreamWriter(f *testing.F) {
	f.Add("move = [1, 0, 2]\nnext_state = [[3, 2], [], [1]]", "", uint8(1), true, "sim-1")
	f.Add(strings.Repeat("long ", 100), "é\"\\\n\t\x00", uint8(3), false, "org/m@fail")
	f.Add("", "", uint8(2), true, "")
	s := newServer(f, Config{})
	f.Fuzz(func(t *testing.T, c0, c1 string, n uint8, usage bool, model string) {
		if !utf8.ValidString(c0) || !utf8.ValidString(c1) || !utf8.ValidString(model) {
			t.Skip("JSON strings carry UTF-8; the generator writes only UTF-8")
		}
		n = 1 + n%MaxN
		req := &chatRequest{Model: model, includeUsage: usage, promptTokens: int(n) * 7}
		a := generated{completionTokens: 11}
		for i := range int(n) {
			c := choice{content: c0, finish: "stop"}
			if i%2 == 1 {
				c = choice{content: c1, finish: "length"}
			}
			a.choices = append(a.choices, c)
		}
		body := s.newChunkWriter(req, s.nextID()).appendStream(nil, req.promptTokens, a)
		st, err := parseStream(body)
		if err != nil {
			t.Fatalf("%v\n%s", err, body)
		}
		if len(st.contents) != int(n) {
			t.Fatalf("%d choices, want %d", len(st.contents), n)
		}
		for i, c := range a.choices {
			if st.contents[i] != c.content || st.finish[i] != c.finish {
				t.Fatalf("choice %d: %q %q, want %q %q", i, st.contents[i], st.finish[i], c.content, c.finish)
			}
		}
		if (st.usage != nil) != usage {
			t.Fatalf("usage chunk %v, want %v", st.usage != nil, usage)
		}
		if usage && (st.usage.Usage.PromptTokens != req.promptTokens || st.usage.Usage.CompletionTokens != 11 || st.usage.Usage.TotalTokens != req.promptTokens+11) {
			t.Fatalf("usage %+v", st.usage.Usage)
		}
		if st.chunks[0].Model != model {
			t.Fatalf("model %q, want %q", st.chunks[0].Model, model)
		}
	})
}
