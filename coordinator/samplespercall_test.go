package coordinator_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestSamplesPerCall: with a wave's samples after its first sent as one
// request and drawn in one call with n, a job decides the same way (the
// same steps, no error, about as many samples a step) while the model is
// called fewer times and paid the prompt fewer times; a voter whose model
// does not answer n draws each sample alone, with its own seed, so the
// job is exactly the one without grouping (same trace, same counts).
func TestSamplesPerCall(t *testing.T) {
	t.Parallel()
	type wire struct{ requests, results uint64 } // messages the streams stored
	run := func(perCall int, supportsN bool) (schemas.JobReport, simllm.Stats, wire) {
		env := fleettest.New(t)
		sim := fleettest.StartSim(t, simllm.Config{Accuracy: 0.9, Seed: 5})
		env.StartCoordinator(coordinator.Config{SamplesPerCall: perCall})
		env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 8, SupportsN: supportsN})
		spec := fleettest.HanoiSpec(6, 3, 5)
		rep := env.Run(&spec)
		var w wire
		for name, n := range map[string]*uint64{env.Topo.NS.SamplesStream(): &w.requests, env.Topo.NS.ResultsStream(): &w.results} {
			s, err := env.JS.Stream(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			*n = s.CachedInfo().State.LastSeq
		}
		return rep, sim.Stats(), w
	}
	base, baseSim, baseWire := run(1, false)
	split, _, _ := run(8, false)
	withN, nSim, nWire := run(8, true)

	// One message a sample without grouping; with n, a call's answers
	// go out together (the greedy first sample's call apart).
	if baseWire.requests != uint64(base.Samples+base.WastedSamples) || baseWire.results != baseWire.requests {
		t.Errorf("one sample a message: %d requests and %d results for %d samples", baseWire.requests, baseWire.results, base.Samples+base.WastedSamples)
	}
	if nWire.requests >= uint64(withN.Samples) || nWire.results >= uint64(withN.Samples) || nWire.results > 2*nWire.requests {
		t.Errorf("with n: %d requests and %d result messages for %d samples: want fewer of each than samples, at most 2 result messages a request",
			nWire.requests, nWire.results, withN.Samples)
	}

	if split.TraceSHA256 != base.TraceSHA256 || split.Samples != base.Samples || split.Votes != base.Votes || split.PromptTokens != base.PromptTokens {
		t.Errorf("grouped requests drawn one call each differ from ungrouped: %d samples, %d votes, %d prompt tokens, trace %s; want %d, %d, %d, %s",
			split.Samples, split.Votes, split.PromptTokens, split.TraceSHA256, base.Samples, base.Votes, base.PromptTokens, base.TraceSHA256)
	}
	if withN.State != schemas.StateSolved || withN.Errors != 0 || withN.Steps != base.Steps {
		t.Fatalf("with n: %s, %d errors, %d steps; want solved like the base (%d steps)", withN.State, withN.Errors, withN.Steps, base.Steps)
	}
	perStep := func(r schemas.JobReport) float64 { return float64(r.Samples) / float64(r.Steps) }
	if d := math.Abs(perStep(withN)/perStep(base) - 1); d > 0.15 {
		t.Errorf("samples a step with n %.2f, without %.2f: the statistics moved", perStep(withN), perStep(base))
	}
	if nSim.Completions >= baseSim.Completions || nSim.Choices < withN.Samples {
		t.Errorf("with n the model took %d calls for %d choices; without, %d calls: no call was saved", nSim.Completions, nSim.Choices, baseSim.Completions)
	}
	if float64(withN.PromptTokens)/float64(withN.Steps) > 0.8*float64(base.PromptTokens)/float64(base.Steps) {
		t.Errorf("prompt tokens a step with n %d, without %d: the prompt is still paid per sample",
			withN.PromptTokens/withN.Steps, base.PromptTokens/base.Steps)
	}
	t.Logf("per decided step: %.0f prompt tokens with n, %.0f without; %d model calls for %d samples, %d without",
		float64(withN.PromptTokens)/float64(withN.Steps), float64(base.PromptTokens)/float64(base.Steps), nSim.Completions, withN.Samples, baseSim.Completions)
}

// BenchmarkSamplesPerCall prints, for one hanoi job of 10 disks on the
// simulated model (p 0.95, k 3, priced at $0.4/$1.6 per million), the
// prompt tokens and dollars per decided step, the samples per step and
// the errors, with a wave's samples drawn one call each and with them
// drawn in one call with n, in the same run. Run with -benchtime=1x.
func BenchmarkSamplesPerCall(b *testing.B) {
	for _, perCall := range []int{1, 8} {
		b.Run(fmt.Sprintf("samples-per-call=%d", perCall), func(b *testing.B) {
			env := fleettest.New(b)
			sim := fleettest.StartSim(b, simllm.Config{Seed: 5})
			ctx := context.Background()
			if _, err := pricetable.Set(ctx, env.Topo.Prices, schemas.ModelPrice{Default: true, InputUSDPerMTok: 0.4, OutputUSDPerMTok: 1.6}); err != nil {
				b.Fatal(err)
			}
			env.StartCoordinator(coordinator.Config{SamplesPerCall: perCall})
			env.StartVoter(fleettest.SimClient(b, sim, llm.Config{}), voter.Config{Concurrency: 16, SupportsN: true})
			spec := fleettest.HanoiSpec(10, 3, 5)
			rep := env.Run(&spec)
			st := sim.Stats()
			s := float64(rep.Steps)
			b.ReportMetric(float64(rep.PromptTokens)/s, "prompt_tokens/step")
			b.ReportMetric(1e6*rep.CostUSD/s, "micro_usd/step")
			b.ReportMetric(float64(rep.Samples)/s, "samples/step")
			b.ReportMetric(float64(rep.Errors), "errors")
			b.ReportMetric(float64(st.Completions)/s, "calls/step")
			b.Logf("%d samples per call: %s, %d steps, %.1f prompt tokens and $%.7f a decided step, %.2f samples and %.2f model calls a step, %d errors",
				perCall, rep.State, rep.Steps, float64(rep.PromptTokens)/s, rep.CostUSD/s, float64(rep.Samples)/s, float64(st.Completions)/s, rep.Errors)
		})
	}
}

// TestCachedPromptTokens: a task whose prompt repeats long instructions
// first has them served from the provider's prompt cache (the simulated
// model caches a repeated prefix of 1,024 tokens or more); the report
// counts the cached tokens and the job is billed them at the cached
// price, less than at the input price.
func TestCachedPromptTokens(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "examples", "tasks", "multiply.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// 1,500 tokens of unchanging instructions before the step's own.
	long := strings.Replace(string(src), "  system: |-\n", "  system: |-\n"+strings.Repeat("    Work carefully and answer in the format asked.\n", 120), 1)
	f := newSpecFleet(t)
	f.startSimVoter(t, simllm.Config{Seed: 3})
	ctx := context.Background()
	price := schemas.ModelPrice{Default: true, InputUSDPerMTok: 0.4, CachedInputUSDPerMTok: 0.1, OutputUSDPerMTok: 1.6}
	if _, err := pricetable.Set(ctx, f.env.Topo.Prices, price); err != nil {
		t.Fatal(err)
	}
	spec := f.job(t, long, `{"a":"314","b":"27"}`, 2)
	rep := f.env.Run(&spec)
	if rep.State != schemas.StateSolved {
		t.Fatalf("%s: %s", rep.State, rep.Reason)
	}
	if rep.CachedPromptTokens <= 0 || rep.CachedPromptTokens >= rep.PromptTokens {
		t.Fatalf("cached %d of %d prompt tokens: want most, not all (the first call of each prefix is not cached)", rep.CachedPromptTokens, rep.PromptTokens)
	}
	full := (float64(rep.PromptTokens)*0.4 + float64(rep.CompletionTokens)*1.6) / 1e6
	want := (float64(rep.PromptTokens-rep.CachedPromptTokens)*0.4 + float64(rep.CachedPromptTokens)*0.1 + float64(rep.CompletionTokens)*1.6) / 1e6
	if math.Abs(rep.CostUSD-want) > 1e-6*float64(rep.Samples) || rep.CostUSD >= full {
		t.Errorf("cost $%.6f, want $%.6f at the cached price (full price $%.6f)", rep.CostUSD, want, full)
	}
	t.Logf("%d of %d prompt tokens cached; $%.6f, $%.6f at the full input price", rep.CachedPromptTokens, rep.PromptTokens, rep.CostUSD, full)
}
