package simllm

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzChatBody: whatever body arrives, the server answers with a status a
// client can act on and a JSON body (a completion or an OpenAI error), and
// never panics.
func FuzzChatBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"n":3,"temperature":0,"seed":7,"max_tokens":5}`,
		`{"model":"m","messages":[]}`,
		`{"model":"m","messages":[{"role":"wizard","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"n":99}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"n":3,"max_tokens":4,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`,
		`{"model":1}`, `[]`, `null`, `{`, ``,
	} {
		f.Add(s)
	}
	srv, err := New(Config{Seed: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rec := post(srv, body)
		switch rec.Code {
		case 200, 400, 413:
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			if rec.Code != 200 {
				t.Fatalf("status %d with an event stream", rec.Code)
			}
			if _, err := parseStream(rec.Body.Bytes()); err != nil {
				t.Fatalf("stream: %v\n%s", err, rec.Body)
			}
			return
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("status %d: body is not JSON: %q", rec.Code, rec.Body.String())
		}
		if rec.Code == 200 {
			var r chatResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil || len(r.Choices) == 0 {
				t.Fatalf("200 without choices: %v %q", err, rec.Body.String())
			}
		}
	})
}
