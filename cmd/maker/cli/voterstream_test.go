package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// lockedLog collects simllm's request log.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// TestVoterStreams: a voter started with MAKER_LLM_STREAM=true asks the
// model for streams (stream: true, include_usage), and red-flags as a
// plain voter does: a streamed reply cut at the token limit is the red
// flag length, the others are votes with their usage.
func TestVoterStreams(t *testing.T) {
	t.Setenv("MAKER_LLM_STREAM", "true")
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	if _, err := topology.Ensure(t.Context(), js, topology.Config{}); err != nil {
		t.Fatal(err)
	}
	var log lockedLog
	sim, err := simllm.Start(t.Context(), "127.0.0.1:0", simllm.Config{Accuracy: 1, OverlongRate: 0.5, Seed: 3,
		Models: []string{simllm.DefaultModel}, LogRequests: &log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close(context.Background()) })

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"voter", "--nats", srv.URL, "--llm-base-url", sim.URL(), "--model", simllm.DefaultModel}, &out, &errb)
	}()
	nc, _ := testkit.Connect(t, srv.URL)
	results := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(bus.DefaultNamespace.ResultJobWildcard("acme", "streamed"), results)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	in, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	const samples = 8
	for i := range samples {
		req := schemas.SampleRequest{
			Header: schemas.NewHeader(schemas.KindSampleRequest), Tenant: "acme", JobID: "streamed",
			SampleID: schemas.SampleID("acme", "streamed", 0, 1, i, 0), Step: 0, Epoch: 1, Index: i,
			Task: hanoi.Name, Params: in.Params(), State: in.Initial(), Temperature: 0.1, Seed: int64(i),
			MaxOutputTokens: 300, Token: "q3Yh0vJ2_kQ9mC1xZpL8aw", IssuedAt: time.Now().UTC(),
		}
		data, err := json.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(t.Context(), bus.DefaultNamespace.SampleSubject("acme", "streamed"), data); err != nil {
			t.Fatal(err)
		}
	}
	var outcomes []string
	for len(outcomes) < samples {
		select {
		case m := <-results:
			var res schemas.SampleResult
			if err := schemas.Decode(m.Data, &res); err != nil {
				t.Fatal(err)
			}
			switch {
			case res.Outcome == schemas.OutcomeRedFlag && res.RedFlag == schemas.RedFlagLength && res.FinishReason == "length":
			case res.Outcome == schemas.OutcomeVote && res.VoteKey != "" && res.FinishReason == "stop" && res.PromptTokens > 0 && res.CompletionTokens > 0:
			default:
				t.Errorf("result %+v", res)
			}
			outcomes = append(outcomes, res.Outcome+"/"+res.RedFlag)
		case code := <-done:
			t.Fatalf("the voter exited %d: %s", code, errb.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d results after 30s: %s", len(outcomes), samples, errb.String())
		}
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Errorf("the voter exited %d when stopped: %s", code, errb.String())
	}
	if !slices.Contains(outcomes, "vote/") || !slices.Contains(outcomes, "red_flag/length") {
		t.Errorf("outcomes %v, want votes and length red flags", outcomes)
	}
	for _, line := range log.lines() {
		if !strings.Contains(line, `"stream":true`) || !strings.Contains(line, `"stream_options":{"include_usage":true}`) {
			t.Errorf("a model request not streamed: %s", line)
		}
	}
}

// The served models of `maker simllm`: the default list holds sim-1 and
// the judge's default models; --model values replace it.
func TestSimllmModels(t *testing.T) {
	t.Parallel()
	def := simllmDefaultModels()
	for _, want := range []string{simllm.DefaultModel, "openai/gpt-5.5", "anthropic/claude-opus-4.8", "openrouter/fusion", "google/gemini-3.1-pro"} {
		if !slices.Contains(def, want) {
			t.Errorf("default models %v lack %s", def, want)
		}
	}
	if def[0] != simllm.DefaultModel {
		t.Errorf("default models start %s", def[0])
	}
	for _, tt := range []struct {
		values []string
		first  string
	}{
		{[]string{"a", "b"}, "a"},
		{[]string{simllm.AnyModel}, simllm.DefaultModel},
		{[]string{simllm.AnyModel, "x"}, "x"},
	} {
		first, all := simllmModels(tt.values)
		if first != tt.first || !slices.Equal(all, tt.values) {
			t.Errorf("%v: %s %v", tt.values, first, all)
		}
		if err := (simllm.Config{Model: first, Models: all}).Validate(); err != nil {
			t.Errorf("%v: %v", tt.values, err)
		}
	}
}

// TestRunStreams: maker run --llm-stream has its voter ask the simulated
// model for streamed replies (over HTTP here); the report is the same job's
// as without streaming, tokens included (they come from the usage chunk).
func TestRunStreams(t *testing.T) {
	t.Parallel()
	report := func(extra ...string) map[string]any {
		o := runMain(t, append([]string{"run", "--disks", "3", "--seed", "5", "--sim-http", "--json"}, extra...)...)
		if o.code != ExitOK {
			t.Fatalf("run %v: exit %d: %s", extra, o.code, o.stderr)
		}
		var rep map[string]any
		if err := json.Unmarshal([]byte(o.stdout), &rep); err != nil {
			t.Fatalf("run %v: %v: %s", extra, err, o.stdout)
		}
		return rep
	}
	plain, streamed := report(), report("--llm-stream")
	for _, f := range []string{"state", "steps", "samples", "prompt_tokens", "completion_tokens", "trace_sha256"} {
		if plain[f] != streamed[f] {
			t.Errorf("%s: %v without streaming, %v with", f, plain[f], streamed[f])
		}
	}
	if streamed["completion_tokens"] == float64(0) {
		t.Error("no completion tokens counted from the stream")
	}
}

// TestRunStreamFlagReachesModel: --llm-stream's fleet option makes the
// in-process voter's requests streamed ones (as the model logs them).
func TestRunStreamFlagReachesModel(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		var log lockedLog
		opts := fleetOptions{sim: simllm.Config{Accuracy: 1, Seed: 1, LogRequests: &log}, stream: stream,
			concurrency: 4, log: slog.New(slog.DiscardHandler)}
		spec := fleettest.HanoiSpec(2, 1, 1)
		rep, err := runJob(t.Context(), opts, &spec, nil, nil)
		if err != nil || !rep.Solved {
			t.Fatalf("stream %v: %v %+v", stream, err, rep)
		}
		lines := log.lines()
		if len(lines) == 0 {
			t.Fatalf("stream %v: no request logged", stream)
		}
		for _, l := range lines {
			if got := strings.Contains(l, `"stream":true`); got != stream {
				t.Errorf("stream %v: request %s", stream, l)
			}
		}
	}
}
