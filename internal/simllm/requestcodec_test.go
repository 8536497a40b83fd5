package simllm

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/makerfleet/makerfleet/internal/llm"
)

// sameDecode checks that decodeRequest and encoding/json's
// decodeRequestJSON give body the same request and the same error, and
// reports whether the fast path took it.
func sameDecode(t testing.TB, body []byte) (fast bool) {
	t.Helper()
	want, wantErr := decodeRequestJSON(body)
	got, gotErr := decodeRequest(body)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErr, wantErr) {
		t.Fatalf("body %q\ndecodeRequest     %+v %+v\nencoding/json     %+v %+v", body, got, gotErr, want, wantErr)
	}
	req, fast := decodeRequestFast(body)
	if fast && (wantErr != nil || !reflect.DeepEqual(req, want)) {
		t.Fatalf("body %q: fast path %+v, encoding/json %+v %+v", body, req, want, wantErr)
	}
	return fast
}

func TestDecodeRequestFast(t *testing.T) {
	t.Parallel()
	const msg = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		body string
		fast bool // the fast path takes it
	}{
		{`{"model":"m",` + msg + `}`, true},
		{" \n{ \"model\" : \"m\" ,\r\n\t\"messages\" : [ { \"role\" : \"user\" , \"content\" : \"hi\" } ] } \n", true},
		{`{}`, true},
		{`{"model":"m","messages":[]}`, true},
		{`{"model":null,"messages":null,"seed":null,"n":null,"max_tokens":null,"stream":null,"stream_options":null}`, true},
		{`{"messages":[null,{"role":"user","content":null},{},{"role":null}]}`, true},
		{`{"messages":[{"role":"system","content":"a"},{"role":"user","content":"b"},{"role":"assistant","content":"c"},{"role":"user","content":"d"},{"role":"tool","content":"e"},{"role":"wizard","content":"f"}]}`, true},
		{`{"messages":[{"role":"user","content":"a\nb\t\"q\" \\ \/ \b\f\r \u00e9\u20ac\u003c\u0000\u00"}]}`, false},
		{`{"messages":[{"role":"user","content":"a\nb\t\"q\" \\ \/ \b\f\r \u00e9\u20ac\u003c\u0000\uFFFD"}]}`, true},
		{`{"model":"héllo ✓ 世界","messages":[{"role":"user","content":"ünïcode"}]}`, true},
		{`{"model":"m",` + msg + `,"top_p":1,"user":"u","stop":["a","\ud83d"],"tools":[{"type":"function","function":{"name":"f","parameters":{"a":[1,-2.5e3,0.1E+2,true,false,null,{}],"\u00e9":"\u00e9"}}}]}`, true},
		{`{"é":1}`, false},
		{`{"temperature":0,` + msg + `}`, true},
		{`{"temperature":0.1,` + msg + `}`, true},
		{`{"temperature":-0}`, true},
		{`{"temperature":1e-1}`, true},
		{`{"temperature":null}`, true},
		{`{"temperature":"0.5"}`, true},
		{`{"temperature":{ "a" : [1, 2] }}`, true},
		{`{"temperature":0.1000000000000000000000001}`, true},
		{`{"seed":-9223372036854775808,"n":9223372036854775807,"max_tokens":0,"max_completion_tokens":-1}`, true},
		{`{"seed":-0,"n":0}`, true},
		{`{"stream":true,"stream_options":{"include_usage":true}}`, true},
		{`{"stream":false,"stream_options":{"include_usage":null,"other":[1]}}`, true},
		{`{"stream_options":{}}`, true},

		// encoding/json's, for errors and what the fast path is not sure of.
		{``, false},
		{`   `, false},
		{`[]`, false},
		{`null`, false},
		{`{`, false},
		{`{"model":"m"`, false},
		{`{"model":"m",}`, false},
		{`{"model":"m"} x`, false},
		{`{"model":"m"}{}`, false},
		{`{"model":1}`, false},
		{`{"model":"a","model":"b"}`, false},
		{`{"Model":"m"}`, false},
		{`{"MESSAGES":[]}`, false},
		{`{"ſtream":true}`, false},
		{`{"mod\u0065l":"m"}`, false},
		{`{"model":"\ud83d\ude00"}`, false},
		{`{"model":"\ud83d"}`, false},
		{"{\"model\":\"\xff\"}", false},
		{"{\"model\":\"a\tb\"}", false},
		{`{"model":"a\x"}`, false},
		{`{"model":"a\u12"}`, false},
		{`{"messages":{"role":"user"}}`, false},
		{`{"messages":["hi"]}`, false},
		{`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, false},
		{`{"messages":[{"role":"user","content":7}]}`, false},
		{`{"messages":[{"role":"user","role":"system"}]}`, false},
		{`{"messages":[{"ROLE":"user"}]}`, false},
		{`{"messages":[{"role":"user"},]}`, false},
		{`{"messages":[],"messages":[]}`, false},
		{`{"seed":1.0}`, false},
		{`{"seed":1e3}`, false},
		{`{"seed":9223372036854775808}`, false},
		{`{"seed":-9223372036854775809}`, false},
		{`{"seed":99999999999999999999}`, false},
		{`{"n":"2"}`, false},
		{`{"n":01}`, false},
		{`{"n":-}`, false},
		{`{"stream":"true"}`, false},
		{`{"stream":1}`, false},
		{`{"stream":tru}`, false},
		{`{"stream_options":1}`, false},
		{`{"stream_options":{"include_usage":true,"include_usage":false}}`, false},
		{`{"stream_options":{"Include_Usage":true}}`, false},
		{`{"stream_options":{"include_usage":"yes"}}`, false},
		{`{"temperature":01}`, false},
		{`{"temperature":.5}`, false},
		{`{"temperature":1.}`, false},
		{`{"temperature":}`, false},
		{`{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, false},
		{`{"x":"a` + "\x01" + `"}`, false},
	} {
		if fast := sameDecode(t, []byte(tc.body)); fast != tc.fast {
			t.Errorf("fast path took %q: %v, want %v", tc.body, fast, tc.fast)
		}
	}
}

// TestRequestCodecKeys: the fast path knows every field encoding/json
// fills; a field added to chatRequest, chatMessage or streamOptions and not
// to the fast path's keys fails here.
func TestRequestCodecKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		typ  reflect.Type
		keys []string
	}{
		{reflect.TypeFor[chatRequest](), requestKeys},
		{reflect.TypeFor[chatMessage](), messageKeys},
		{reflect.TypeFor[streamOptions](), optionKeys},
	} {
		var tags []string
		for f := range tc.typ.Fields() {
			if f.IsExported() {
				tags = append(tags, f.Tag.Get("json"))
			}
		}
		if !reflect.DeepEqual(tags, tc.keys) {
			t.Errorf("%s: json tags %q, fast path keys %q", tc.typ, tags, tc.keys)
		}
	}
}

// TestDecodeRequestGoOpenAI: every body the fleet's client (go-openai
// behind internal/llm) sends takes the fast path, to the same request.
func TestDecodeRequestGoOpenAI(t *testing.T) {
	t.Parallel()
	for _, body := range goOpenAIBodies(t, 4) {
		if !sameDecode(t, body) {
			t.Errorf("a go-openai body took encoding/json: %s", body)
		}
	}
}

// FuzzDecodeRequest: the fast path and encoding/json make the same
// request and the same error of every body.
func FuzzDecodeRequest(f *testing.F) {
	for _, body := range goOpenAIBodies(f, 3) {
		f.Add(body)
	}
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"a\n\u00e9"}],"temperature":0.1,"seed":-3,"n":2}`,
		`{"messages":[null,{}],"stream":true,"stream_options":{"include_usage":false},"x":[{"y":null}]}`,
		`{"Model":"m","model":"n"}`, `{"seed":1e3}`, `{"model":"\ud83d\ude00"}`, `{"temperature":"x"}`,
		`{"messages":[{"content":[{"text":"a"}]}]}`, `{"n":9223372036854775808}`, `{} x`, `[`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sameDecode(t, body)
	})
}

// BenchmarkDecodeRequest: the fast path and encoding/json side by side on
// the body go-openai sends for a 10-disk step (benchChat's load).
func BenchmarkDecodeRequest(b *testing.B) {
	body := goOpenAIBodies(b, 10)[0]
	if !sameDecode(b, body) {
		b.Fatal("the body takes encoding/json")
	}
	for _, bc := range []struct {
		name   string
		decode func([]byte) (*chatRequest, *apiError)
	}{{"fast", decodeRequest}, {"reflection", decodeRequestJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, e := bc.decode(body); e != nil {
					b.Fatal(e.message)
				}
			}
		})
	}
}

// goOpenAIBodies returns the bodies the fleet's model client (internal/llm
// on go-openai) sends for a step of a Towers of Hanoi instance with disks
// disks: the first as a voter's sample (temperature 0.1, a seed,
// max_tokens), then other calls, streamed or not.
func goOpenAIBodies(t testing.TB, disks int) [][]byte {
	t.Helper()
	sim := newServer(t, Config{})
	rec := &bodyRecorder{next: sim.Transport()}
	in := mustInstance(t, disks)
	var msgs []llm.Message
	for _, m := range messages(t, in, in.Initial()) {
		msgs = append(msgs, llm.Message{Role: m["role"], Content: m["content"]})
	}
	seed := int64(7)
	bigSeed := int64(-1 << 62)
	for _, c := range []struct {
		stream bool
		req    llm.Request
	}{
		{false, llm.Request{Messages: msgs, Temperature: 0.1, Seed: &seed, MaxTokens: 750}},
		{false, llm.Request{Messages: msgs, Temperature: 0, N: 3}},
		{false, llm.Request{Messages: msgs[len(msgs)-1:], Temperature: 1.25, Seed: &bigSeed, Model: "org/strong"}},
		{true, llm.Request{Messages: msgs, Temperature: 0.7, Seed: &seed, MaxTokens: 750, N: 2}},
		{true, llm.Request{Messages: append(msgs, llm.Message{Role: "assistant", Content: "move = [1, 0, 2]"}, llm.Message{Role: "user", Content: "Try again: <answer> & \"quotes\"\u2028."}), Temperature: 0.3}},
	} {
		client, err := llm.New(llm.Config{BaseURL: "http://simllm.in-process/v1", Model: DefaultModel, Stream: c.stream,
			MaxAttempts: 1, HTTPClient: &http.Client{Transport: rec}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Complete(context.Background(), c.req); err != nil {
			t.Fatal(err)
		}
		client.Close()
	}
	if len(rec.bodies) != 5 {
		t.Fatalf("%d bodies recorded, want 5", len(rec.bodies))
	}
	return rec.bodies
}

// bodyRecorder keeps the body of every request it passes on.
type bodyRecorder struct {
	next   http.RoundTripper
	mu     sync.Mutex
	bodies [][]byte
}

func (r *bodyRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.bodies = append(r.bodies, body)
	r.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(body))
	return r.next.RoundTrip(req)
}
