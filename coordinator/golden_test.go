package coordinator_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden.json from this run")

// goldenCase is one job whose decisions and accounting are fixed.
type goldenCase struct {
	Name       string  `json:"name"`
	Disks      int     `json:"disks"`
	K          int     `json:"k"`
	Seed       int64   `json:"seed"`
	Accuracy   float64 `json:"accuracy"`
	Malformed  float64 `json:"malformed_rate,omitempty"`
	Overlong   float64 `json:"overlong_rate,omitempty"`
	MaxSamples int     `json:"max_samples,omitempty"`
	Stronger   int     `json:"stronger_samples,omitempty"` // > 0: a stronger model climbs in
	Panel      bool    `json:"panel,omitempty"`
}

// goldenFigures are the parts of a report a refactor must not change: what
// was decided, and every sample and token counted on the way.
type goldenFigures struct {
	State            string           `json:"state"`
	Steps            int64            `json:"steps"`
	Errors           int64            `json:"errors"`
	TraceSHA256      string           `json:"trace_sha256"`
	Samples          int64            `json:"samples"`
	Votes            int64            `json:"votes"`
	RedFlagged       int64            `json:"red_flagged"`
	RedFlags         map[string]int64 `json:"red_flags"`
	Wasted           int64            `json:"wasted_samples"`
	MaxSamplesInStep int              `json:"max_samples_in_step"`
	MaxSamplesStep   int64            `json:"max_samples_step"`
	PromptTokens     int64            `json:"prompt_tokens"`
	CompletionTokens int64            `json:"completion_tokens"`
	StrongerPrompt   int64            `json:"stronger_prompt_tokens"`
	Escalations      int64            `json:"escalations"`
	ArbiterDecisions int64            `json:"arbiter_decisions"`
	ArbiterSteps     []int64          `json:"arbiter_steps"`
	NoConsensusStep  int64            `json:"no_consensus_step"`
	NoConsensusN     int              `json:"no_consensus_samples"`
}

func figuresOf(rep schemas.JobReport) goldenFigures {
	g := goldenFigures{
		State: rep.State, Steps: rep.Steps, Errors: rep.Errors, TraceSHA256: rep.TraceSHA256,
		Samples: rep.Samples, Votes: rep.Votes, RedFlagged: rep.RedFlagged, RedFlags: rep.RedFlags,
		Wasted: rep.WastedSamples, MaxSamplesInStep: rep.MaxSamplesInStep, MaxSamplesStep: rep.MaxSamplesStep,
		PromptTokens: rep.PromptTokens, CompletionTokens: rep.CompletionTokens, StrongerPrompt: rep.StrongerPromptTokens,
		Escalations: rep.Escalations, ArbiterDecisions: rep.ArbiterDecisions, ArbiterSteps: rep.ArbiterSteps,
		NoConsensusStep: -1,
	}
	if len(g.RedFlags) == 0 {
		g.RedFlags = nil
	}
	if nc := rep.NoConsensus; nc != nil {
		g.NoConsensusStep, g.NoConsensusN = nc.Step, nc.Samples
	}
	return g
}

var goldenCases = []goldenCase{
	{Name: "odd disks", Disks: 5, K: 2, Seed: 7, Accuracy: 0.9},
	{Name: "even disks", Disks: 6, K: 3, Seed: 11, Accuracy: 0.85},
	{Name: "red flags", Disks: 4, K: 2, Seed: 5, Accuracy: 0.9, Malformed: 0.15, Overlong: 0.1},
	{Name: "no consensus", Disks: 4, K: 4, Seed: 3, Accuracy: 0.55, MaxSamples: 10},
	{Name: "stronger model", Disks: 4, K: 3, Seed: 9, Accuracy: 0.6, MaxSamples: 8, Stronger: 30},
	{Name: "panel", Disks: 3, K: 3, Seed: 13, Accuracy: 0.55, MaxSamples: 6, Stronger: 6, Panel: true},
}

// TestGolden fixes what a set of seeded jobs decide and count: odd and
// even disks, red flags, a step without consensus, and both rungs of the
// escalation ladder. The simulated model's answers are a function of the
// job seed and the request, and votes are counted in index order, so the
// figures are the same on every run; a refactor of the coordinator must
// keep them (go test -run TestGolden -update-golden rewrites the file,
// for a change that means to alter behaviour).
func TestGolden(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "golden.json")
	want := map[string]goldenFigures{}
	if !*updateGolden {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]goldenFigures, len(goldenCases))
	t.Run("cases", func(t *testing.T) {
		for i, gc := range goldenCases {
			t.Run(gc.Name, func(t *testing.T) {
				t.Parallel()
				got[i] = runGolden(t, gc, coordinator.Config{})
				if *updateGolden {
					return
				}
				w, ok := want[gc.Name]
				if !ok {
					t.Fatalf("no golden figures for %q: run with -update-golden", gc.Name)
				}
				a, _ := json.Marshal(got[i])
				b, _ := json.Marshal(w)
				if string(a) != string(b) {
					t.Errorf("figures changed:\n got %s\nwant %s", a, b)
				}
			})
		}
	})
	if *updateGolden && !t.Failed() {
		out := map[string]goldenFigures{}
		for i, gc := range goldenCases {
			out[gc.Name] = got[i]
		}
		data, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func runGolden(t *testing.T, gc goldenCase, cfg coordinator.Config) goldenFigures {
	env := fleettest.New(t)
	if gc.Panel {
		startJudge(t, env, panelOf([]string{"m1", "m2", "m3"}))
	}
	sim := fleettest.StartSim(t, simllm.Config{
		Accuracy: gc.Accuracy, Seed: gc.Seed, MalformedRate: gc.Malformed, OverlongRate: gc.Overlong,
	})
	env.StartCoordinator(cfg)
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 16})
	spec := fleettest.HanoiSpec(gc.Disks, gc.K, gc.Seed)
	spec.MaxSamplesPerStep = gc.MaxSamples
	if gc.Stronger > 0 || gc.Panel {
		spec.Escalation = &schemas.EscalationPolicy{Panel: gc.Panel}
		if gc.Stronger > 0 {
			spec.Escalation.StrongerModel, spec.Escalation.StrongerSamples = "sim-strong", gc.Stronger
		}
	}
	rep := env.Run(&spec)
	checkCounters(t, rep)
	return figuresOf(rep)
}
