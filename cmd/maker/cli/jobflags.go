package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// jobFlags are the flags that describe a job, shared by run, submit and
// bench.
type jobFlags struct {
	task            string
	disks           int
	params          string
	paramsJSONL     []string // FIELD=FILE
	k               int
	p               float64
	target          float64
	seed            int64
	tenant          string
	jobID           string
	maxSamples      int
	maxOutputTokens int
	sampleTimeout   time.Duration
	tempFirst       float64
	tempRest        float64
	inputPrice      float64
	outputPrice     float64
	budget          float64
	priority        int
	specDepth       int
	specMaxWaste    float64
	// adaptive k and decorrelation (docs/statistics.md)
	relTarget   float64
	kFloor      int
	decorrelate string
	decorTemp   float64
	models      []string
	// calibrated, when set, finds the stored calibration of the job's
	// task (maker calibrate): without --p, spec takes p and the valid
	// fraction from it (calibrate.go). pFrom says where spec's p came from.
	calibrated func(ctx context.Context, ref task.Ref, inst task.Instance) (schemas.Calibration, bool)
	pFrom      string
}

func addJobFlags(cmd *cobra.Command, f *jobFlags, defaultP string) {
	fl := cmd.Flags()
	fl.StringVar(&f.task, "task", "hanoi", "task to run: a built-in one, or a registered task spec as NAME or NAME@VERSION (the latest version when none is given)")
	fl.IntVar(&f.disks, "disks", 10, "hanoi: number of disks, 1..30 (2^n - 1 steps)")
	fl.StringVar(&f.params, "params", "", `task params as JSON (overrides --disks), e.g. '{"disks":12}', or @FILE to read them from a file`)
	fl.StringArrayVar(&f.paramsJSONL, "params-jsonl", nil, "FIELD=FILE: set params field FIELD to the JSON values in FILE, one a line (JSON Lines), e.g. transfers=ledger.jsonl; repeatable")
	fl.IntVar(&f.k, "k", 0, "voting margin k (default: the smallest k that reaches --target at --p)")
	fl.Float64Var(&f.p, "p", 0, "estimated chance one valid sample is right, in (0.5, 1), used to pick k and for theory figures (default "+defaultP+")")
	fl.Float64Var(&f.target, "target", schemas.DefaultTarget, "wanted chance the whole task is solved, used to pick k")
	fl.Int64Var(&f.seed, "seed", 1, "seed: sample seeds derive from it, so a run is reproducible")
	fl.StringVar(&f.tenant, "tenant", schemas.DefaultTenant, "tenant that owns the job")
	fl.StringVar(&f.jobID, "job-id", "", "job id (default: generated)")
	fl.IntVar(&f.maxSamples, "max-samples", schemas.DefaultMaxSamplesPerStep, "most samples one step may draw before the job ends as no_consensus")
	fl.IntVar(&f.maxOutputTokens, "max-output-tokens", schemas.DefaultMaxOutputTokens, "red flag: replies longer than this many tokens are discarded")
	fl.DurationVar(&f.sampleTimeout, "sample-timeout", time.Duration(schemas.DefaultSampleTimeoutMS)*time.Millisecond, "re-sample a sample with no answer after this long")
	fl.Float64Var(&f.tempFirst, "temperature-first", 0, "temperature of each step's first sample")
	fl.Float64Var(&f.tempRest, "temperature-rest", schemas.DefaultTemperatureRest, "temperature of every later sample")
	fl.Float64Var(&f.inputPrice, "input-price", 0, "model price, USD per million input tokens: maker run's own fleet's price; on a fleet, the job's own claim, which the fleet does not bill by (maker prices)")
	fl.Float64Var(&f.outputPrice, "output-price", 0, "model price, USD per million output tokens (like --input-price)")
	fl.Float64Var(&f.budget, "budget-usd", 0, "most the job may spend, in USD, at the fleet's prices (maker run: --input-price/--output-price); refused below the forecast's lowest cost, paused as budget_exhausted before it would go over")
	fl.IntVar(&f.priority, "priority", 0, "priority among the tenant's own jobs, 0 to 9 (higher first)")
	fl.IntVar(&f.specDepth, "speculation-depth", defaultSpeculationDepth, fmt.Sprintf("sample up to this many steps ahead of the open one, from a guess of each winner (0 turns it off, at most %d); decisions are unchanged, samples of guesses that lose are wasted", schemas.MaxSpeculationDepth))
	fl.Float64Var(&f.specMaxWaste, "speculation-max-waste", schemas.DefaultSpeculationMaxWaste, "stop speculating while the samples lost guesses threw away exceed this share of the job's samples, in (0, 1]")
	fl.Float64Var(&f.relTarget, "reliability-target", 0, "adaptive k: the wanted chance that every step is right, in (0, 1); each step's k is then chosen from the job's own votes so far (--k is the start, --p a weak prior); the report's receipt shows the schedule and the bound achieved")
	fl.IntVar(&f.kFloor, "k-floor", 0, fmt.Sprintf("with --reliability-target: the smallest k adaptive k may choose (default %d)", schemas.DefaultKFloor))
	fl.StringVar(&f.decorrelate, "decorrelate", schemas.DecorrelateAuto, "a step whose samples run far past what p predicts (correlated errors): on draws its remaining samples with a paraphrased prompt (and --decorrelate-temperature, --models), off only counts it; auto is on with --reliability-target")
	fl.Float64Var(&f.decorTemp, "decorrelate-temperature", 0, "temperature of a correlated step's decorrelated samples, in (0, 2] (default: --temperature-rest)")
	fl.StringSliceVar(&f.models, "models", nil, fmt.Sprintf("the job's model mix for decorrelation, comma-separated (at most %d): a correlated step's decorrelated samples ask them in turn; voters must allow them", schemas.MaxJobModels))
}

// defaultSpeculationDepth is --speculation-depth when not given: with a
// model of 200 ms a step takes about a fifth of a call instead of a whole
// one (docs/benchmarks.md). A job spec that leaves speculation_depth out
// (the API, batches) does not speculate.
const defaultSpeculationDepth = 4

// checkTemperatures refuses temperatures outside [0, 2].
func (f *jobFlags) checkTemperatures() error {
	for _, t := range []struct {
		name string
		v    float64
	}{{"--temperature-first", f.tempFirst}, {"--temperature-rest", f.tempRest}} {
		if !(t.v >= 0 && t.v <= 2) {
			return usagef("%s %v must be between 0 and 2", t.name, t.v)
		}
	}
	return nil
}

// spec builds and fully validates the job spec, its task found through
// tasks. p is the estimate to use when --p is not set (0: none known),
// pSource says where it comes from. Nothing is sent.
func (f *jobFlags) spec(cmd *cobra.Command, p float64, pSource string, validFraction float64, tasks jobs.Tasks) (schemas.JobSpec, task.Instance, error) {
	if err := f.checkTemperatures(); err != nil {
		return schemas.JobSpec{}, nil, err
	}
	if err := checkTenant(f.tenant); err != nil {
		return schemas.JobSpec{}, nil, err
	}
	if f.jobID != "" {
		if err := checkJobID(f.jobID); err != nil {
			return schemas.JobSpec{}, nil, err
		}
	}
	if !(validFraction > 0) {
		return schemas.JobSpec{}, nil, usagef("every sample would be red-flagged (valid fraction %v): no vote could ever be counted", validFraction)
	}
	ctx := cmd.Context()
	name, version, err := taskreg.ParseRef(f.task)
	if err != nil {
		return schemas.JobSpec{}, nil, usageError{err}
	}
	// An unknown task is reported as such, not as missing --params.
	ref, err := tasks.Resolve(ctx, name, version)
	if err != nil {
		return schemas.JobSpec{}, nil, usageError{err}
	}
	params, err := f.paramsFor(ref)
	if err != nil {
		return schemas.JobSpec{}, nil, err
	}
	if len(params) > schemas.MaxParamsBytes {
		return schemas.JobSpec{}, nil, usagef("--params: the params are %s, over the fleet's limit of %s", jobs.Bytes(int64(len(params))), jobs.Bytes(schemas.MaxParamsBytes))
	}
	inst, err := task.BindRef(ctx, tasks, ref, params)
	if err != nil {
		return schemas.JobSpec{}, nil, usageError{err}
	}
	var cal *schemas.Calibration
	if !cmd.Flags().Changed("p") && f.calibrated != nil {
		if c, ok := f.calibrated(ctx, ref, inst); ok {
			cal = &c
			p, pSource = c.JobP()
			validFraction = c.ValidFraction
		}
	}
	f.pFrom = pSource
	kGiven := cmd.Flags().Changed("k")
	switch {
	case cmd.Flags().Changed("p"):
		f.pFrom = "--p"
		// An explicit --p 0 is refused too: 0 stands for "no estimate"
		// only when the flag is left out.
		p = f.p
		if !(p > 0.5 && p < 1) {
			return schemas.JobSpec{}, nil, usagef("--p %v: p must be in (0.5, 1): voting only converges when a sample is more likely right than wrong", p)
		}
	case p != 0 && !(p > 0.5 && p < 1):
		if !kGiven {
			return schemas.JobSpec{}, nil, usagef("cannot choose k: %s is %.4g, and voting only converges when a sample is more likely right than wrong (p > 0.5); give --k to run anyway", pSource, p)
		}
		p = 0 // no usable estimate: the report has no theory figures
	}
	if math.IsNaN(f.target) || f.target <= 0 || f.target >= 1 {
		return schemas.JobSpec{}, nil, usagef("--target %v must be in (0, 1)", f.target)
	}
	if !(f.inputPrice >= 0) || !(f.outputPrice >= 0) { // NaN too
		return schemas.JobSpec{}, nil, usagef("prices must be >= 0")
	}
	if f.maxSamples < 1 {
		return schemas.JobSpec{}, nil, usagef("--max-samples must be >= 1, got %d", f.maxSamples)
	}
	if f.maxOutputTokens < 1 {
		return schemas.JobSpec{}, nil, usagef("--max-output-tokens must be >= 1, got %d", f.maxOutputTokens)
	}
	if f.specDepth < 0 || f.specDepth > schemas.MaxSpeculationDepth {
		return schemas.JobSpec{}, nil, usagef("--speculation-depth %d must be between 0 (off) and %d", f.specDepth, schemas.MaxSpeculationDepth)
	}
	if !(f.specMaxWaste > 0 && f.specMaxWaste <= 1) {
		return schemas.JobSpec{}, nil, usagef("--speculation-max-waste %v must be in (0, 1]", f.specMaxWaste)
	}
	if f.sampleTimeout <= 0 {
		return schemas.JobSpec{}, nil, usagef("--sample-timeout must be > 0")
	}
	if err := f.checkReliability(cmd); err != nil {
		return schemas.JobSpec{}, nil, err
	}
	k := f.k
	if kGiven {
		if k < 1 {
			return schemas.JobSpec{}, nil, usagef("--k %d: k must be >= 1", k)
		}
	} else {
		if p == 0 {
			return schemas.JobSpec{}, nil, usagef("give --k, or --p so k can be chosen")
		}
		target := f.target
		if f.relTarget > 0 && !cmd.Flags().Changed("target") {
			target = f.relTarget // the start k for the reliability target
		}
		k, err = plan.KMin(p, task.PlannedSteps(inst), target)
		if err != nil {
			return schemas.JobSpec{}, nil, usageError{err}
		}
	}
	rest := f.tempRest
	spec := schemas.JobSpec{
		Header:            schemas.NewHeader(schemas.KindJobSpec),
		JobID:             f.jobID,
		Tenant:            f.tenant,
		Task:              ref.Name,
		TaskVersion:       ref.Version,
		TaskHash:          ref.Hash,
		Params:            params,
		K:                 k,
		MaxSamplesPerStep: f.maxSamples,
		MaxOutputTokens:   f.maxOutputTokens,
		Seed:              f.seed,
		TemperatureFirst:  f.tempFirst,
		TemperatureRest:   &rest,
		SampleTimeoutMS:   f.sampleTimeout.Milliseconds(),
		PEstimate:         p,
		ValidFraction:     validFraction,
		BudgetUSD:         f.budget,
		Priority:          f.priority,
		SpeculationDepth:  f.specDepth,
	}
	if f.specDepth > 0 && f.specMaxWaste != schemas.DefaultSpeculationMaxWaste {
		spec.SpeculationMaxWaste = f.specMaxWaste
	}
	spec.ReliabilityTarget, spec.KFloor, spec.DecorrelateTemperature = f.relTarget, f.kFloor, f.decorTemp
	if f.decorrelate != schemas.DecorrelateAuto {
		spec.Decorrelate = f.decorrelate
	}
	if len(f.models) > 0 {
		spec.Models = f.models
	}
	if cal != nil {
		spec.PromptTokensEstimate, spec.CompletionTokensEstimate = cal.PromptTokensMean, cal.CompletionTokensMean
	}
	if f.inputPrice > 0 || f.outputPrice > 0 {
		spec.Pricing = &schemas.Pricing{InputUSDPerMTok: f.inputPrice, OutputUSDPerMTok: f.outputPrice}
	}
	// Admitted at the job's own prices: the client does not read the
	// fleet's table (maker run makes them its own fleet's; a fleet holds a
	// submitted job to its table).
	if err := jobs.PrepareAdmitted(ctx, &spec, tasks, pricing.Table{}); err != nil {
		return schemas.JobSpec{}, nil, usageError{err}
	}
	return spec, inst, nil
}

// checkReliability refuses adaptive-k and decorrelation flags out of
// range, naming the flag.
func (f *jobFlags) checkReliability(cmd *cobra.Command) error {
	if t := f.relTarget; t != 0 || cmd.Flags().Changed("reliability-target") {
		if !(t > 0 && t < 1) { // NaN and ±Inf too
			return usagef("--reliability-target %v must be in (0, 1): the wanted chance that every step is right", t)
		}
	}
	if cmd.Flags().Changed("k-floor") {
		switch {
		case f.relTarget == 0:
			return usagef("--k-floor needs --reliability-target: a fixed k has no floor")
		case f.kFloor < 1 || f.kFloor > f.maxSamples:
			return usagef("--k-floor %d must be between 1 and --max-samples (%d)", f.kFloor, f.maxSamples)
		}
	}
	switch f.decorrelate {
	case schemas.DecorrelateAuto, schemas.DecorrelateOn, schemas.DecorrelateOff:
	default:
		return usagef("--decorrelate %q: want %s, %s or %s", f.decorrelate, schemas.DecorrelateAuto, schemas.DecorrelateOn, schemas.DecorrelateOff)
	}
	if cmd.Flags().Changed("decorrelate-temperature") && !(f.decorTemp > 0 && f.decorTemp <= 2) {
		return usagef("--decorrelate-temperature %v must be in (0, 2]", f.decorTemp)
	}
	if len(f.models) > schemas.MaxJobModels {
		return usagef("--models lists %d models, at most %d", len(f.models), schemas.MaxJobModels)
	}
	for _, m := range f.models {
		if strings.TrimSpace(m) == "" || strings.TrimSpace(m) != m {
			return usagef("--models %q: a model name is empty or has spaces around it", strings.Join(f.models, ","))
		}
	}
	return nil
}

// paramsFor reads --params (JSON, or @FILE) and --params-jsonl, or makes
// hanoi's from --disks.
func (f *jobFlags) paramsFor(ref task.Ref) (json.RawMessage, error) {
	raw := f.params
	if file, ok := strings.CutPrefix(raw, "@"); ok {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, usagef("--params %s: %v", raw, err)
		}
		raw = string(data)
	}
	if raw == "" && len(f.paramsJSONL) == 0 {
		if ref.Name != "hanoi" || ref.Version != "" {
			return nil, usagef("--params is required for task %q", ref.String())
		}
		params, _ := json.Marshal(map[string]int{"disks": f.disks})
		return params, nil
	}
	if raw != "" && !json.Valid([]byte(raw)) {
		return nil, usagef("--params is not valid JSON: %s", clipText(raw, 200))
	}
	if len(f.paramsJSONL) == 0 {
		return json.RawMessage(raw), nil
	}
	obj := map[string]json.RawMessage{}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &obj); err != nil || obj == nil {
			return nil, usagef("--params must be a JSON object to add --params-jsonl fields to")
		}
	}
	for _, arg := range f.paramsJSONL {
		field, list, err := readJSONL(arg)
		if err != nil {
			return nil, err
		}
		if _, dup := obj[field]; dup {
			return nil, usagef("--params-jsonl %s: params already has %q", arg, field)
		}
		obj[field] = list
	}
	params, err := json.Marshal(obj)
	if err != nil {
		return nil, usagef("--params: %v", err)
	}
	return params, nil
}

// readJSONL reads a --params-jsonl FIELD=FILE: the file's JSON values, one
// a line (blank lines skipped), as a JSON list.
func readJSONL(arg string) (field string, list json.RawMessage, err error) {
	field, file, ok := strings.Cut(arg, "=")
	if !ok || field == "" || file == "" {
		return "", nil, usagef("--params-jsonl %q: want FIELD=FILE", arg)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", nil, usagef("--params-jsonl %s: %v", arg, err)
	}
	out := []byte{'['}
	n := 0
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !json.Valid([]byte(line)) {
			return "", nil, usagef("--params-jsonl %s: line %d is not one JSON value: %s", file, i+1, clipText(line, 120))
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, line...)
		n++
	}
	return field, append(out, ']'), nil
}

// builtinTasks pins built-in tasks only: a command that has no fleet to
// ask (yet).
func builtinTasks() *taskreg.Registry {
	return taskreg.New(nil, builtin.Registry(), taskspec.CompileSpec)
}

// isBuiltin reports whether --task names a built-in task.
func (f *jobFlags) isBuiltin() bool {
	_, err := builtin.Registry().Lookup(f.task)
	return err == nil
}

// describe is a one-line summary of a spec.
func describe(spec schemas.JobSpec) string {
	return fmt.Sprintf("%s %s k=%d seed=%d job=%s/%s", spec.Task, string(spec.Params), spec.K, spec.Seed, spec.Tenant, spec.JobID)
}

// clipText shortens s to n bytes for a message.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
