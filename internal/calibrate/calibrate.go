package calibrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/sampling"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Model is what calibration needs of a model client; *llm.Client has it.
type Model interface {
	Complete(ctx context.Context, req llm.Request) (llm.Response, error)
}

var _ Model = (*llm.Client)(nil)

// Defaults of Config.
const (
	DefaultSamples     = 1000
	DefaultConfidence  = 0.95
	DefaultConcurrency = 8
	// DefaultTemperature is the paper's calibration temperature: that of a
	// step's every vote but the first.
	DefaultTemperature = schemas.DefaultTemperatureRest
)

// ErrCannotJudge: the instance has no reference answer to judge samples by
// (it wraps task.ErrNoReference).
var ErrCannotJudge = fmt.Errorf("calibration needs a task that can judge answers: hanoi, or a spec with a reference: %w", task.ErrNoReference)

// ErrModel: the model failed so that nothing can be measured (it refused
// the requests, is out of quota, or too many calls failed).
var ErrModel = errors.New("calibrate: the model failed")

// Config configures Run. Zero values take the documented defaults.
type Config struct {
	// Task names the task the instance is bound from (a spec's version and
	// hash pin it). Required.
	Task task.Ref
	// Model is the model asked, and named in the result. Required.
	Model string
	// PromptVersion names the prompt measured. Default PromptVersion(Task,
	// inst).
	PromptVersion string
	// Samples is how many steps are drawn, one sample each. Default 1000;
	// at most schemas.MaxCalibrationSamples.
	Samples int
	// Seed draws the steps and seeds every sample. Zero is a seed too.
	Seed int64
	// Temperature of every sample. Default (nil) DefaultTemperature, 0.1.
	Temperature *float64
	// MaxOutputTokens is the red-flag limit on a reply, sent to the model
	// as max_tokens. Default schemas.DefaultMaxOutputTokens (750).
	MaxOutputTokens int
	// Confidence is the level of the intervals, in (0, 1). Default 0.95.
	Confidence float64
	// Concurrency bounds the model calls in flight. Default 8.
	Concurrency int
	// SimHints sends each call the step it is (llm.SimHint), for the
	// simulated model answering a task spec. Never for a real model.
	// Default false.
	SimHints bool
	// MaxFailed is how many calls may fail without an answer (the model
	// server's errors after its client's retries) before Run gives up with
	// ErrModel; failed calls are not samples. Default 5 % of Samples, at
	// least 10.
	MaxFailed int
	// Progress, if set, is called after each sample with the samples done.
	// Calls may come from several goroutines at once.
	Progress func(done int)
	// Now is the clock of MeasuredAt. Default time.Now.
	Now func() time.Time
}

func (c *Config) defaults(inst task.Instance) error {
	if c.Task.Name == "" {
		return errors.New("calibrate: Config.Task is required")
	}
	if strings.TrimSpace(c.Model) == "" {
		return errors.New("calibrate: Config.Model is required")
	}
	if c.Samples == 0 {
		c.Samples = DefaultSamples
	}
	if c.Samples < 1 || c.Samples > schemas.MaxCalibrationSamples {
		return fmt.Errorf("calibrate: samples must be between 1 and %d, got %d", schemas.MaxCalibrationSamples, c.Samples)
	}
	if c.Temperature == nil {
		t := DefaultTemperature
		c.Temperature = &t
	}
	if t := *c.Temperature; !(t >= 0 && t <= 2) {
		return fmt.Errorf("calibrate: temperature %v outside [0, 2]", t)
	}
	if c.MaxOutputTokens == 0 {
		c.MaxOutputTokens = schemas.DefaultMaxOutputTokens
	}
	if c.MaxOutputTokens < 1 {
		return fmt.Errorf("calibrate: max output tokens must be >= 1, got %d", c.MaxOutputTokens)
	}
	if c.Confidence == 0 {
		c.Confidence = DefaultConfidence
	}
	if !(c.Confidence > 0 && c.Confidence < 1) {
		return fmt.Errorf("calibrate: confidence %v outside (0, 1)", c.Confidence)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Concurrency < 1 || c.Concurrency > 10_000 {
		return fmt.Errorf("calibrate: concurrency must be between 1 and 10000, got %d", c.Concurrency)
	}
	if c.MaxFailed == 0 {
		c.MaxFailed = max(10, c.Samples/20)
	}
	if c.MaxFailed < 0 {
		return fmt.Errorf("calibrate: max failed must be >= 0, got %d", c.MaxFailed)
	}
	if c.PromptVersion == "" {
		c.PromptVersion = PromptVersion(c.Task, inst)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// PromptVersioner is implemented by instances whose prompt template has a
// version of its own, the same for every params (hanoi's: a hash of the
// prompts of fixed states).
type PromptVersioner interface {
	PromptVersion() string
}

// PromptVersion names the prompt a calibration measures: for a task spec
// (ref pins a hash) 12 hex digits of the spec's hash, the spec being the
// prompt; for an instance that says (PromptVersioner) its own; else 12 hex
// digits of the SHA-256 of the prompt of the instance's initial state.
func PromptVersion(ref task.Ref, inst task.Instance) string {
	if ref.Hash != "" {
		h := strings.TrimPrefix(ref.Hash, "sha256:")
		if len(h) >= 12 {
			return h[:12]
		}
		return shortHash(ref.Hash)
	}
	if v, ok := inst.(PromptVersioner); ok {
		return v.PromptVersion()
	}
	msgs, err := inst.Prompt(inst.Initial())
	if err != nil {
		return shortHash("no prompt: " + err.Error())
	}
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role + "\x00" + m.Content + "\x00")
	}
	return shortHash(b.String())
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// judge is what Run needs of an instance: draw steps and say their right
// answers.
type judge interface {
	task.Instance
	task.Drawer
	task.Referencer
}

// draw is one drawn step.
type draw struct {
	i     int
	state task.State
	right string
}

// Run measures model on cfg.Samples steps of inst drawn at random (seeded):
// one sample a step at cfg.Temperature, judged as a voter judges it
// (internal/sampling: red flags, then the task's strict parser), a vote
// right when it is the task's reference answer. inst must draw states and
// know their answers (task.Drawer and task.Referencer): else ErrCannotJudge.
// The result's figures and intervals are Estimate's; it is not stored.
func Run(ctx context.Context, inst task.Instance, model Model, cfg Config) (schemas.Calibration, error) {
	if err := cfg.defaults(inst); err != nil {
		return schemas.Calibration{}, err
	}
	in, ok := inst.(judge)
	if !ok {
		return schemas.Calibration{}, ErrCannotJudge
	}
	// The first draw finds a spec without a usable reference before any
	// model call.
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), drawStream))
	first, err := drawOne(in, rng, 0)
	if err != nil {
		return schemas.Calibration{}, err
	}

	var (
		mu       sync.Mutex
		tally    Tally
		done     int
		firstErr error
	)
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	draws := make(chan draw, cfg.Concurrency)
	// One producer draws the steps in order, so the i-th sample's step is
	// the same whatever the calls' timing.
	wg.Go(func() {
		defer close(draws)
		d := first
		for i := 0; i < cfg.Samples; i++ {
			if i > 0 {
				var err error
				if d, err = drawOne(in, rng, i); err != nil {
					fail(err)
					return
				}
			}
			select {
			case draws <- d:
			case <-gctx.Done():
				return
			}
		}
	})
	for range cfg.Concurrency {
		wg.Go(func() {
			for d := range draws {
				if gctx.Err() != nil {
					continue // drain: the producer stops at the next send
				}
				res, failed, err := sample(gctx, in, model, &cfg, d)
				if err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				if failed != nil {
					tally.Failed++
					if tally.Failed > int64(cfg.MaxFailed) {
						mu.Unlock()
						fail(fmt.Errorf("%w: %d calls failed without an answer (at most %d allowed); the last: %w", ErrModel, tally.Failed, cfg.MaxFailed, failed))
						continue
					}
				} else {
					tally.Add(res, d.right)
				}
				done++
				n := done
				mu.Unlock()
				if cfg.Progress != nil {
					cfg.Progress(n)
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return schemas.Calibration{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return schemas.Calibration{}, err
	}
	if tally.Samples == 0 {
		return schemas.Calibration{}, fmt.Errorf("%w: no call was answered", ErrModel)
	}
	c, err := tally.Estimate(cfg.Confidence)
	if err != nil {
		return schemas.Calibration{}, err
	}
	c.Task, c.TaskVersion, c.TaskHash = cfg.Task.Name, cfg.Task.Version, cfg.Task.Hash
	c.Params = json.RawMessage(inst.Params())
	c.Model, c.PromptVersion = cfg.Model, cfg.PromptVersion
	c.Temperature, c.MaxOutputTokens = *cfg.Temperature, cfg.MaxOutputTokens
	c.Seed = cfg.Seed
	c.MeasuredAt = cfg.Now().UTC().Truncate(time.Second)
	return c, nil
}

// drawStream is the PCG stream of the steps' draw (the seed picks the
// state).
const drawStream = 0xca11b7a7e

// drawOne draws the i-th step and its right answer.
func drawOne(in judge, rng *rand.Rand, i int) (draw, error) {
	s, step, err := in.DrawState(rng)
	if errors.Is(err, task.ErrNoReference) {
		return draw{}, fmt.Errorf("%w (%w)", ErrCannotJudge, err)
	}
	if err != nil {
		return draw{}, fmt.Errorf("calibrate: draw step: %w", err)
	}
	v, err := in.ReferenceVote(s)
	if err != nil {
		return draw{}, fmt.Errorf("calibrate: the reference answer at step %d: %w", step, err)
	}
	return draw{i: i, state: s, right: v.Key}, nil
}

// sample asks for and judges the sample of d. A call that ends without an
// answer the voter would count is returned as failed (not a sample); one
// that must stop the measurement as err.
func sample(ctx context.Context, in judge, model Model, cfg *Config, d draw) (res schemas.SampleResult, failed, err error) {
	prompt, err := in.Prompt(d.state)
	if err != nil {
		return res, nil, fmt.Errorf("calibrate: prompt: %w", err)
	}
	call := sampling.Request(prompt, *cfg.Temperature, cfg.MaxOutputTokens, sampleSeed(cfg.Seed, d.i), cfg.Model)
	if cfg.SimHints {
		call.Headers = llm.SimHint{Task: cfg.Task.Name, Version: cfg.Task.Version, Hash: cfg.Task.Hash,
			Params: in.Params(), State: d.state}.Headers()
	}
	resp, err := model.Complete(ctx, call)
	switch {
	case err == nil:
		return sampling.Judge(in, d.state, cfg.MaxOutputTokens, resp), nil, nil
	case ctx.Err() != nil:
		return res, nil, ctx.Err()
	case errors.Is(err, llm.ErrBadResponse):
		// As the voter: the server answers with nothing usable, a red flag.
		return schemas.SampleResult{Outcome: schemas.OutcomeRedFlag, RedFlag: schemas.RedFlagEmpty}, nil, nil
	case errors.Is(err, llm.ErrPermanent), errors.Is(err, llm.ErrQuota):
		// Asking again cannot help: a bad key, an unknown model, no credit.
		return res, nil, fmt.Errorf("%w: %w", ErrModel, err)
	default:
		return res, err, nil
	}
}

// sampleSeed is the i-th sample's request seed (splitmix64 of the seed and
// i): different for every sample, the same for every run with this seed.
func sampleSeed(seed int64, i int) int64 {
	z := uint64(seed)*0x9e3779b97f4a7c15 + uint64(i+1)*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return int64((z ^ (z >> 31)) >> 1)
}

// Tally counts a calibration's samples.
type Tally struct {
	// Samples answered, Valid of them votes, Right of those the reference
	// answer; Failed calls ended without an answer (not samples).
	Samples, Valid, Right, Failed int64
	// PromptTokens and CompletionTokens sum the answered calls' usage.
	PromptTokens, CompletionTokens int64
	// RedFlags counts red-flagged samples by reason.
	RedFlags map[string]int64
}

// Add counts one judged sample whose right vote key is right.
func (t *Tally) Add(res schemas.SampleResult, right string) {
	t.Samples++
	t.PromptTokens += int64(res.PromptTokens)
	t.CompletionTokens += int64(res.CompletionTokens)
	if res.Outcome == schemas.OutcomeVote {
		t.Valid++
		if res.VoteKey == right {
			t.Right++
		}
		return
	}
	if t.RedFlags == nil {
		t.RedFlags = map[string]int64{}
	}
	t.RedFlags[res.RedFlag]++
}

// Estimate turns the tally into a calibration's figures: p = Right/Valid
// and the valid fraction Valid/Samples, each with its Clopper–Pearson
// interval at conf, and the mean tokens of a call. Only the figures are
// set (and Header, Confidence, Method).
func (t Tally) Estimate(conf float64) (schemas.Calibration, error) {
	c := schemas.Calibration{
		Header:  schemas.NewHeader(schemas.KindCalibration),
		Samples: t.Samples, Valid: t.Valid, Right: t.Right, Failed: t.Failed,
		Confidence: conf, Method: schemas.CalibrationClopperPearson,
	}
	pi, err := plan.ClopperPearson(t.Right, t.Valid, conf)
	if err != nil {
		return c, err
	}
	vi, err := plan.ClopperPearson(t.Valid, t.Samples, conf)
	if err != nil {
		return c, err
	}
	if t.Valid > 0 {
		c.P = float64(t.Right) / float64(t.Valid)
	}
	if t.Samples > 0 {
		c.ValidFraction = float64(t.Valid) / float64(t.Samples)
		c.PromptTokensMean = float64(t.PromptTokens) / float64(t.Samples)
		c.CompletionTokensMean = float64(t.CompletionTokens) / float64(t.Samples)
	}
	// The bisection's last bit must not put the estimate outside.
	c.PLow, c.PHigh = min(pi.Low, c.P), max(pi.High, c.P)
	c.ValidLow, c.ValidHigh = min(vi.Low, c.ValidFraction), max(vi.High, c.ValidFraction)
	c.TokensPerCall = c.PromptTokensMean + c.CompletionTokensMean
	if len(t.RedFlags) > 0 {
		c.RedFlags = make(map[string]int64, len(t.RedFlags))
		for k, v := range t.RedFlags {
			c.RedFlags[k] = v
		}
	}
	return c, nil
}
