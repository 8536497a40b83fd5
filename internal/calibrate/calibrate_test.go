package calibrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/calibrate"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/task/spec"
)

// simModel is the simulated model in memory, behind the same client the
// voters use.
func simModel(t testing.TB, cfg simllm.Config) (*llm.Client, *simllm.Server) {
	t.Helper()
	sim, err := simllm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := llm.New(llm.Config{BaseURL: "http://simllm.in-process/v1", Model: simllm.DefaultModel,
		HTTPClient: &http.Client{Transport: sim.Transport()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, sim
}

func hanoiInst(t testing.TB, n int) *hanoi.Instance {
	t.Helper()
	in, err := hanoi.New(n)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func run(t testing.TB, inst task.Instance, m calibrate.Model, cfg calibrate.Config) schemas.Calibration {
	t.Helper()
	if cfg.Task.Name == "" {
		cfg.Task = task.Ref{Name: hanoi.Name}
	}
	if cfg.Model == "" {
		cfg.Model = simllm.DefaultModel
	}
	c, err := calibrate.Run(context.Background(), inst, m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("the result is not a valid record: %v\n%+v", err, c)
	}
	return c
}

// TestRunFindsTheAccuracy: the simulated model at accuracy 0.9 (its
// accuracy at temperature 0.1, the calibration's), 2,000 seeded samples of
// 10-disk steps: the 99 % Clopper-Pearson interval of p contains 0.9, every
// sample is valid, and tokens are counted.
func TestRunFindsTheAccuracy(t *testing.T) {
	t.Parallel()
	m, sim := simModel(t, simllm.Config{Accuracy: 0.9, Seed: 7})
	c := run(t, hanoiInst(t, 10), m, calibrate.Config{Samples: 2000, Seed: 3, Confidence: 0.99})
	if !(c.PLow <= 0.9 && 0.9 <= c.PHigh) {
		t.Errorf("p %v: the 99 %% Clopper-Pearson interval [%v, %v] misses the true 0.9", c.P, c.PLow, c.PHigh)
	}
	if c.Samples != 2000 || c.Valid != 2000 || c.ValidFraction != 1 || len(c.RedFlags) != 0 {
		t.Errorf("samples %d valid %d (%v) red flags %v; want 2000 valid", c.Samples, c.Valid, c.ValidFraction, c.RedFlags)
	}
	st := sim.Stats()
	if st.Completions != 2000 || float64(st.PromptTokens)/2000 != c.PromptTokensMean || float64(st.CompletionTokens)/2000 != c.CompletionTokensMean {
		t.Errorf("the model served %d calls, %d + %d tokens; the calibration says %v + %v a call", st.Completions, st.PromptTokens, st.CompletionTokens, c.PromptTokensMean, c.CompletionTokensMean)
	}
	if c.TokensPerCall != c.PromptTokensMean+c.CompletionTokensMean || c.PromptTokensMean < 100 {
		t.Errorf("tokens per call %v of %v + %v", c.TokensPerCall, c.PromptTokensMean, c.CompletionTokensMean)
	}
	if c.Temperature != 0.1 || c.MaxOutputTokens != 750 || c.Method != schemas.CalibrationClopperPearson || c.Confidence != 0.99 {
		t.Errorf("settings %+v", c)
	}
	if c.PromptVersion != hanoiInst(t, 3).PromptVersion() || string(c.Params) != `{"disks":10}` {
		t.Errorf("prompt version %q, params %s", c.PromptVersion, c.Params)
	}
}

// TestRunRedFlags: red flags are counted by reason, as a voter counts
// them, and the valid fraction's 99 % interval contains the truth
// (1 − 0.15 − 0.05); p is estimated from the valid samples only.
func TestRunRedFlags(t *testing.T) {
	t.Parallel()
	m, _ := simModel(t, simllm.Config{Accuracy: 0.95, MalformedRate: 0.15, OverlongRate: 0.05, Seed: 11})
	c := run(t, hanoiInst(t, 8), m, calibrate.Config{Samples: 2000, Seed: 5, Confidence: 0.99})
	const wantValid = 0.8
	if !(c.ValidLow <= wantValid && wantValid <= c.ValidHigh) {
		t.Errorf("valid fraction %v: the 99 %% interval [%v, %v] misses %v", c.ValidFraction, c.ValidLow, c.ValidHigh, wantValid)
	}
	if !(c.PLow <= 0.95 && 0.95 <= c.PHigh) {
		t.Errorf("p %v: the 99 %% interval [%v, %v] misses 0.95", c.P, c.PLow, c.PHigh)
	}
	if c.RedFlags[schemas.RedFlagParse] == 0 || c.RedFlags[schemas.RedFlagLength] == 0 || len(c.RedFlags) != 2 {
		t.Errorf("red flags %v, want parse and length", c.RedFlags)
	}
}

// TestRunIsSeeded: the same seed gives the same figures at any
// concurrency; another seed other steps.
func TestRunIsSeeded(t *testing.T) {
	t.Parallel()
	m, _ := simModel(t, simllm.Config{Accuracy: 0.8, MalformedRate: 0.1, Seed: 2})
	in := hanoiInst(t, 12)
	at := func(seed int64, conc int) schemas.Calibration {
		c := run(t, in, m, calibrate.Config{Samples: 300, Seed: seed, Concurrency: conc, Now: func() time.Time { return time.Unix(0, 0) }})
		return c
	}
	a, b := at(9, 1), at(9, 16)
	aj, _ := json.Marshal(a)
	bj, _ := json.Marshal(b)
	if string(aj) != string(bj) {
		t.Errorf("seed 9 at concurrency 1 and 16 differ:\n%s\n%s", aj, bj)
	}
	if c := at(10, 8); c.Right == a.Right && c.Valid == a.Valid && c.CompletionTokensMean == a.CompletionTokensMean {
		t.Errorf("seeds 9 and 10 gave the same figures: %+v", c)
	}
}

// TestRunSpec: a task spec with a reference is calibrated on its reference
// chain; the simulated model answers it from the hints.
func TestRunSpec(t *testing.T) {
	t.Parallel()
	tk := exampleSpec(t, "multiply.yaml")
	src := specSource{tk}
	m, _ := simModel(t, simllm.Config{Accuracy: 0.9, Seed: 4, Tasks: src})
	inst, err := tk.Bind(json.RawMessage(`{"a":"31415","b":"2718"}`))
	if err != nil {
		t.Fatal(err)
	}
	ref := task.Ref{Name: tk.Name(), Version: tk.Version(), Hash: tk.Hash()}
	c := run(t, inst, m, calibrate.Config{Task: ref, Samples: 1000, Seed: 1, SimHints: true, Confidence: 0.99})
	if !(c.PLow <= 0.9 && 0.9 <= c.PHigh) || c.Valid != 1000 {
		t.Errorf("p %v in [%v, %v] of %d valid, want 0.9 inside, all valid", c.P, c.PLow, c.PHigh, c.Valid)
	}
	if c.Task != "multiply" || c.TaskHash != tk.Hash() || c.PromptVersion != calibrate.PromptVersion(ref, inst) || len(c.PromptVersion) != 12 {
		t.Errorf("task %q hash %q prompt version %q", c.Task, c.TaskHash, c.PromptVersion)
	}
}

// specSource serves one compiled spec to the simulated model.
type specSource struct{ t *spec.Task }

func (s specSource) Task(_ context.Context, ref task.Ref) (task.Task, error) {
	if ref.Name == s.t.Name() && ref.Hash == s.t.Hash() {
		return s.t, nil
	}
	return nil, task.ErrUnknownTask
}

func exampleSpec(t testing.TB, name string) *spec.Task {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "examples", "tasks", name))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := spec.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestRunCannotJudge: a task without a reference is refused before any
// model call.
func TestRunCannotJudge(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	m := modelFunc(func(context.Context, llm.Request) (llm.Response, error) {
		calls.Add(1)
		return llm.Response{}, errors.New("not called")
	})
	blind, err := exampleSpec(t, "classify.yaml").Bind(json.RawMessage(`{"choices":["a","b"],"records":["x","y"]}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, inst := range map[string]task.Instance{"spec without truth": blind, "no Drawer": plainInstance{hanoiInst(t, 3)}} {
		_, err := calibrate.Run(context.Background(), inst, m, calibrate.Config{Task: task.Ref{Name: "x"}, Model: "m"})
		if !errors.Is(err, calibrate.ErrCannotJudge) || !errors.Is(err, task.ErrNoReference) {
			t.Errorf("%s: %v, want ErrCannotJudge", name, err)
		}
	}
	if calls.Load() != 0 {
		t.Errorf("%d model calls", calls.Load())
	}
}

// plainInstance hides everything but task.Instance.
type plainInstance struct{ task.Instance }

type modelFunc func(context.Context, llm.Request) (llm.Response, error)

func (f modelFunc) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	return f(ctx, req)
}

// TestRunModelFailures: a model that refuses for good stops the run; one
// whose calls fail now and then is measured on the answered calls, the
// failures counted apart, until too many fail; an unusable reply is the
// red flag empty, as for a voter.
func TestRunModelFailures(t *testing.T) {
	t.Parallel()
	in := hanoiInst(t, 5)
	right := func(req llm.Request) llm.Response {
		return llm.Response{Choices: []llm.Choice{{Content: "move = [1, 0, 2]\nnext_state = [[5, 4, 3, 2], [], [1]]", FinishReason: "stop"}},
			PromptTokens: 10, CompletionTokens: 5}
	}
	tests := []struct {
		name    string
		fail    func(i int64) error // nil: answered
		wantErr error
		failed  int64
		empty   int64
	}{
		{"permanent", func(int64) error { return fmt.Errorf("%w: 401", llm.ErrPermanent) }, calibrate.ErrModel, 0, 0},
		{"quota", func(int64) error { return &llm.RetryLaterError{Quota: true, Cause: errors.New("429")} }, calibrate.ErrModel, 0, 0},
		{"every fourth call fails", func(i int64) error {
			if i%4 == 0 {
				return fmt.Errorf("%w: 503", llm.ErrRetryBudget)
			}
			return nil
		}, calibrate.ErrModel, 0, 0},
		{"a few fail", func(i int64) error {
			if i%50 == 0 {
				return fmt.Errorf("%w: 503", llm.ErrRetryBudget)
			}
			return nil
		}, nil, 4, 0},
		{"unusable replies", func(i int64) error {
			if i%10 == 0 {
				return fmt.Errorf("%w: no choices", llm.ErrBadResponse)
			}
			return nil
		}, nil, 0, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			m := modelFunc(func(_ context.Context, req llm.Request) (llm.Response, error) {
				if err := tt.fail(n.Add(1)); err != nil {
					return llm.Response{}, err
				}
				return right(req), nil
			})
			c, err := calibrate.Run(context.Background(), in, m, calibrate.Config{Task: task.Ref{Name: "hanoi"}, Model: "m", Samples: 200, Concurrency: 4})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("%v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Failed != tt.failed || c.RedFlags[schemas.RedFlagEmpty] != tt.empty || c.Samples != 200-tt.failed {
				t.Errorf("failed %d, empty %d, samples %d; want %d, %d, %d", c.Failed, c.RedFlags[schemas.RedFlagEmpty], c.Samples, tt.failed, tt.empty, 200-tt.failed)
			}
		})
	}
}

func TestRunCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int64
	m := modelFunc(func(ctx context.Context, _ llm.Request) (llm.Response, error) {
		if n.Add(1) == 5 {
			cancel()
		}
		<-ctx.Done()
		return llm.Response{}, ctx.Err()
	})
	_, err := calibrate.Run(ctx, hanoiInst(t, 4), m, calibrate.Config{Task: task.Ref{Name: "hanoi"}, Model: "m", Samples: 100})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("%v, want context.Canceled", err)
	}
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	m := modelFunc(func(context.Context, llm.Request) (llm.Response, error) { return llm.Response{}, errors.New("no") })
	neg := -0.1
	for name, cfg := range map[string]calibrate.Config{
		"no task":            {Model: "m"},
		"no model":           {Task: task.Ref{Name: "hanoi"}},
		"blank model":        {Task: task.Ref{Name: "hanoi"}, Model: "  "},
		"negative samples":   {Task: task.Ref{Name: "hanoi"}, Model: "m", Samples: -1},
		"too many samples":   {Task: task.Ref{Name: "hanoi"}, Model: "m", Samples: schemas.MaxCalibrationSamples + 1},
		"confidence 1":       {Task: task.Ref{Name: "hanoi"}, Model: "m", Confidence: 1},
		"negative temp":      {Task: task.Ref{Name: "hanoi"}, Model: "m", Temperature: &neg},
		"zero concurrency":   {Task: task.Ref{Name: "hanoi"}, Model: "m", Concurrency: -3},
		"negative max token": {Task: task.Ref{Name: "hanoi"}, Model: "m", MaxOutputTokens: -1},
	} {
		if _, err := calibrate.Run(context.Background(), hanoiInst(t, 3), m, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPromptVersion: hanoi's is the same for every disk count; a spec's is
// its hash's; another task's is its initial prompt's.
func TestPromptVersion(t *testing.T) {
	t.Parallel()
	h := task.Ref{Name: "hanoi"}
	v3, v20 := calibrate.PromptVersion(h, hanoiInst(t, 3)), calibrate.PromptVersion(h, hanoiInst(t, 20))
	if v3 != v20 || len(v3) != 12 {
		t.Errorf("hanoi: %q at 3 disks, %q at 20", v3, v20)
	}
	tk := exampleSpec(t, "multiply.yaml")
	inst, _ := tk.Bind(json.RawMessage(`{"a":"12","b":"3"}`))
	if v := calibrate.PromptVersion(task.Ref{Name: tk.Name(), Hash: tk.Hash()}, inst); "sha256:"+v != tk.Hash()[:len("sha256:")+12] {
		t.Errorf("spec: %q of hash %q", v, tk.Hash())
	}
	p := plainInstance{hanoiInst(t, 3)}
	if v := calibrate.PromptVersion(h, p); v == v3 || len(v) != 12 || v != calibrate.PromptVersion(h, p) {
		t.Errorf("plain: %q", v)
	}
}
