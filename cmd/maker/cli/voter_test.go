package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// TestVoterChecksModel: a voter whose model server does not answer exits 1
// at once, naming the URL and the error; one whose server does not list
// its model asks the model for one token: served, it says so and runs on;
// refused (404 model_not_found), it exits 1 naming the model and the
// provider's answer, before taking any sample.
func TestVoterChecksModel(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)

	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		port, err := testkit.FreePort() // nothing listens there
		if err != nil {
			t.Fatal(err)
		}
		url := "http://127.0.0.1:" + strconv.Itoa(port) + "/v1"
		// Well inside the bound: a voter that starts anyway runs until
		// this ends, and exits interrupted.
		ctx, cancel := context.WithTimeout(context.Background(), 2*modelCheckTimeout)
		defer cancel()
		var out, errb syncBuffer
		start := time.Now()
		code := Main(ctx, []string{"voter", "--nats", srv.URL, "--llm-base-url", url, "--model", "m"}, &out, &errb)
		if code != ExitError || !strings.HasPrefix(errb.String(), "maker: model server "+url+": GET /models: ") ||
			!strings.Contains(errb.String(), "connection refused") {
			t.Errorf("exit %d, stderr %q; want exit %d naming %s and the connection refused", code, errb.String(), ExitError, url)
		}
		if took := time.Since(start); took > modelCheckTimeout {
			t.Errorf("the voter took %s to give up, want under %s", took, modelCheckTimeout)
		}
	})

	t.Run("model not served", func(t *testing.T) {
		t.Parallel()
		// Serves sim-1 and sim-strong; any other name gets 404
		// model_not_found.
		sim := fleettest.StartSim(t, simllm.Config{Models: []string{"sim-strong"}})
		ctx, cancel := context.WithTimeout(context.Background(), 2*modelCheckTimeout)
		defer cancel()
		var out, errb syncBuffer
		code := Main(ctx, []string{"voter", "--nats", srv.URL, "--llm-base-url", sim.URL(), "--model", "gpt-nope"}, &out, &errb)
		msg := errb.String()
		if code != ExitError || !strings.Contains(msg, "maker: model server "+sim.URL()+` does not serve "gpt-nope" to this key`) ||
			!strings.Contains(msg, "404") {
			t.Errorf("exit %d, stderr %q; want exit %d naming the server, the model and the 404", code, msg, ExitError)
		}
	})

	t.Run("model not listed", func(t *testing.T) {
		t.Parallel()
		sim := fleettest.StartSim(t, simllm.Config{}) // lists sim-1
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// The topology is the coordinators' to create; a voter waits for it.
		_, js := testkit.Connect(t, srv.URL)
		if _, err := topology.Ensure(t.Context(), js, topology.Config{}); err != nil {
			t.Fatal(err)
		}
		var out, errb syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- Main(ctx, []string{"voter", "--nats", srv.URL, "--llm-base-url", sim.URL(), "--model", "other-model"}, &out, &errb)
		}()
		// Running: pulling sample requests.
		pulling := func() bool {
			c, err := js.Consumer(t.Context(), bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters)
			if err != nil {
				return false
			}
			info, err := c.Info(t.Context())
			return err == nil && info.NumWaiting > 0
		}
		for deadline := time.Now().Add(30 * time.Second); !pulling(); {
			if time.Now().After(deadline) {
				t.Fatalf("the voter is not pulling after 30s: %s", errb.String())
			}
			select {
			case code := <-done:
				t.Fatalf("the voter exited %d: %s", code, errb.String())
			case <-time.After(10 * time.Millisecond): // poll interval
			}
		}
		cancel()
		if code := <-done; code != ExitOK {
			t.Errorf("the voter exited %d when stopped, want 0: %s", code, errb.String())
		}
		log := errb.String()
		for _, want := range []string{"level=INFO", "does not list the model but answers it", `model=other-model`, sim.URL(), `lists sim-1; not \"other-model\"`} {
			if !strings.Contains(log, want) {
				t.Errorf("stderr lacks %q:\n%s", want, log)
			}
		}
	})
}

// TestVoterPolicyFlagsRefused: the policy flags and their variables are
// checked before anything starts.
func TestVoterPolicyFlagsRefused(t *testing.T) {
	base := []string{"voter", "--nats", "nats://127.0.0.1:1", "--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m"}
	for _, c := range []struct {
		name      string
		args      []string
		env, says string
	}{
		{"ceiling 0", []string{"--max-tokens-ceiling", "0"}, "", "--max-tokens-ceiling must be >= 1, got 0"},
		{"temperature 0", []string{"--temperature-max", "0"}, "", "--temperature-max must be above 0 and at most 2, got 0"},
		{"temperature 2.5", []string{"--temperature-max", "2.5"}, "", "--temperature-max must be above 0 and at most 2, got 2.5"},
		{"bad replies 0", []string{"--bad-reply-attempts", "0"}, "", "--bad-reply-attempts must be >= 1, got 0"},
		{"variable not a number", nil, "MAKER_MAX_TOKENS_CEILING=lots", "$MAKER_MAX_TOKENS_CEILING: "},
		{"variable out of range", nil, "MAKER_TEMPERATURE_MAX=3", "--temperature-max must be above 0 and at most 2, got 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				k, v, _ := strings.Cut(c.env, "=")
				t.Setenv(k, v)
			}
			var out, errb syncBuffer
			code := Main(t.Context(), append(append([]string(nil), base...), c.args...), &out, &errb)
			if code != ExitUsage || !strings.Contains(errb.String(), c.says) {
				t.Errorf("exit %d, stderr %q; want exit %d saying %q", code, errb.String(), ExitUsage, c.says)
			}
		})
	}
}

// TestVoterPolicyFlags: finding 3 of issue 9 through the command. A voter
// run as `maker voter --model m --max-tokens-ceiling 1000 --temperature-max
// 0.5` with MAKER_ALLOW_MODELS=strong answers a forged request naming
// openai/o1-pro with max_tokens 200000 at temperature 1.9 as the red flag
// policy, and the provider receives no completion call for it; a request
// within the flags (the allowed model) reaches the provider.
func TestVoterPolicyFlags(t *testing.T) {
	t.Setenv("MAKER_ALLOW_MODELS", "strong")
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	if _, err := topology.Ensure(t.Context(), js, topology.Config{}); err != nil { // the coordinators' part
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		models []string // the model of each completion call
	)
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m"},{"id":"strong"}]}`)
			return
		}
		var body struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		models = append(models, body.Model)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","model":"strong","choices":[{"index":0,"message":{"role":"assistant","content":"no idea"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)
	}))
	t.Cleanup(prov.Close)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"voter", "--nats", srv.URL, "--llm-base-url", prov.URL + "/v1", "--model", "m",
			"--max-tokens-ceiling", "1000", "--temperature-max", "0.5"}, &out, &errb)
	}()

	nc, _ := testkit.Connect(t, srv.URL)
	results := make(chan *nats.Msg, 8)
	sub, err := nc.ChanSubscribe(bus.DefaultNamespace.ResultJobWildcard("acme", "forged"), results)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	in, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	for step, c := range []struct {
		model     string
		maxTokens int
		temp      float64
	}{{"openai/o1-pro", 200_000, 1.9}, {"strong", 1000, 0.5}} {
		req := schemas.SampleRequest{
			Header: schemas.NewHeader(schemas.KindSampleRequest), Tenant: "acme", JobID: "forged",
			SampleID: schemas.SampleID("acme", "forged", int64(step), 1, 0, 0), Step: int64(step), Epoch: 1,
			Task: hanoi.Name, Params: in.Params(), State: in.Initial(), Temperature: c.temp, Seed: 1,
			MaxOutputTokens: c.maxTokens, Model: c.model, Token: "q3Yh0vJ2_kQ9mC1xZpL8aw", IssuedAt: time.Now().UTC(),
		}
		data, err := json.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(t.Context(), bus.DefaultNamespace.SampleSubject("acme", "forged"), data); err != nil {
			t.Fatal(err)
		}
	}
	got := map[int64]schemas.SampleResult{}
	for len(got) < 2 {
		select {
		case m := <-results:
			var res schemas.SampleResult
			if err := schemas.Decode(m.Data, &res); err != nil {
				t.Fatal(err)
			}
			got[res.Step] = res
		case code := <-done:
			t.Fatalf("the voter exited %d: %s", code, errb.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 2 results after 30s: %s", len(got), errb.String())
		}
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Errorf("the voter exited %d when stopped: %s", code, errb.String())
	}
	if r := got[0]; r.RedFlag != schemas.RedFlagPolicy || !strings.Contains(r.Detail, `model "openai/o1-pro" is not allowed`) ||
		!strings.Contains(r.Detail, "ceiling 1000") || !strings.Contains(r.Detail, "outside [0, 0.5]") {
		t.Errorf("forged request answered %+v, want the red flag policy naming all three", r)
	}
	if r := got[1]; r.RedFlag == schemas.RedFlagPolicy {
		t.Errorf("request within the flags refused: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(models) != 1 || models[0] != "strong" {
		t.Errorf("the provider was asked for models %v, want [strong] only", models)
	}
	for _, want := range []string{"refusing a sample request outside this voter's model policy", "tenant=acme", "job=forged", "model=openai/o1-pro", "max_output_tokens=200000", "temperature=1.9"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("the log lacks %q", want)
		}
	}
}
