package coordinator_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// splitAt makes the job's own model split its votes at step hard (right,
// wrong, right, wrong, wrong: no lead of 2 within 5 samples) and answer
// every other call right; the model named strong is always right.
func splitAt(hard int64) fleettest.Script {
	return func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		if c.Model == "" && c.Known && c.Step == hard && c.Index%2 == 1 || c.Model == "" && c.Known && c.Step == hard && c.Index == 4 {
			return fleettest.Say(fleettest.SameMoveWrongState(c)), nil
		}
		return fleettest.Right(c), nil
	}
}

// TestEscalationLadder: a step whose own model reaches no consensus climbs
// the job's ladder. With a stronger model, that model's votes decide the
// step (a decision by votes, counted as an escalation); with only the
// panel, the judge arbitrates among the candidates and its choice is
// journaled as an arbiter decision, not votes. Either way the job ends
// with the true solution.
func TestEscalationLadder(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, hard = 3, 2, 47, 3
	cases := []struct {
		name     string
		policy   schemas.EscalationPolicy
		panel    []string
		escal    int64
		arbiters int64
	}{
		{name: "stronger model decides", policy: schemas.EscalationPolicy{StrongerModel: "strong", StrongerSamples: 6}, escal: 1},
		// Two members side with the minority candidate (the right one):
		// the panel's majority, not the tally, decides.
		{name: "panel arbitrates", policy: schemas.EscalationPolicy{Panel: true}, panel: []string{"m1@dissent", "m2@dissent", "m3"}, arbiters: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := fleettest.New(t)
			if tc.panel != nil {
				startJudge(t, env, panelOf(tc.panel))
			}
			env.StartCoordinator(coordinator.Config{})
			seeds := fleettest.SeedTable(jobSeed, 1<<disks-1, 64)
			model := fleettest.NewFakeModel(seeds, splitAt(hard))
			env.StartVoter(model, voter.Config{Concurrency: 4})
			spec := fleettest.HanoiSpec(disks, k, jobSeed)
			spec.MaxSamplesPerStep = 5
			pol := tc.policy
			spec.Escalation = &pol
			// The fleet's prices, not the job's claims (0 for both), price
			// the samples.
			ownPrice, strongPrice := &schemas.Pricing{InputUSDPerMTok: 1, OutputUSDPerMTok: 2}, &schemas.Pricing{InputUSDPerMTok: 10, OutputUSDPerMTok: 40}
			env.SetPrice("", *ownPrice)
			env.SetPrice("strong", *strongPrice)
			spec.Pricing = &schemas.Pricing{}
			if pol.StrongerModel != "" {
				pol.StrongerPricing = &schemas.Pricing{}
			}

			rep := env.Run(&spec)
			checkSolved(t, rep, disks)
			// The stronger model's tokens are priced as its own, the
			// panel's calls at what the judge reported.
			var strongerCalls int64
			for _, r := range model.Records() {
				if r.Model == "strong" {
					strongerCalls++
				}
			}
			if rep.StrongerPromptTokens != 120*strongerCalls || (strongerCalls > 0) != (rep.StrongerCompletionTokens > 0) {
				t.Errorf("stronger tokens %d/%d for %d calls of 120 prompt tokens", rep.StrongerPromptTokens, rep.StrongerCompletionTokens, strongerCalls)
			}
			if (tc.arbiters > 0) != (rep.ArbiterCostUSD > 0) {
				t.Errorf("arbiter cost %v with %d arbiter decisions", rep.ArbiterCostUSD, tc.arbiters)
			}
			wantCost := ownPrice.Cost(rep.PromptTokens-rep.StrongerPromptTokens, rep.CompletionTokens-rep.StrongerCompletionTokens) +
				strongPrice.Cost(rep.StrongerPromptTokens, rep.StrongerCompletionTokens) + rep.ArbiterCostUSD
			// Each answer is priced on its own, rounded up to a nano-dollar.
			if math.Abs(rep.CostUSD-wantCost) > 1e-9*float64(rep.Samples+rep.WastedSamples+1) || rep.CostUSD <= ownPrice.Cost(rep.PromptTokens, rep.CompletionTokens) ||
				rep.UnverifiedCostUSD != 0 {
				t.Errorf("cost %v (unverified %v), want %v: the stronger model or the panel priced at the job's price", rep.CostUSD, rep.UnverifiedCostUSD, wantCost)
			}
			if rep.Escalations != tc.escal || rep.ArbiterDecisions != tc.arbiters {
				t.Errorf("escalations %d, arbiter decisions %d; want %d, %d", rep.Escalations, rep.ArbiterDecisions, tc.escal, tc.arbiters)
			}
			if tc.arbiters > 0 && (len(rep.ArbiterSteps) != 1 || rep.ArbiterSteps[0] != hard) {
				t.Errorf("arbiter steps %v, want [%d]", rep.ArbiterSteps, hard)
			}
			// The own model's 5 samples at the hard step are in the report.
			if rep.Votes+rep.RedFlagged != rep.Samples || rep.Samples < (int64(1<<disks-1)-tc.arbiters)*k+5 {
				t.Errorf("samples %d (votes %d, red-flagged %d): the hard step's samples are not all accounted", rep.Samples, rep.Votes, rep.RedFlagged)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var kinds []string
			err := journal.ReadAll(ctx, env.JS, bus.DefaultNamespace, spec.Tenant, spec.JobID, func(e journal.Entry) error {
				if e.Step == hard && e.Type != schemas.EntryTakeover {
					kinds = append(kinds, e.Type+"/"+e.Rung)
					if len(e.Prior) == 0 || e.Prior[0].Rung != "own_model" || e.Prior[0].Counted != 5 {
						t.Errorf("hard step's entry has prior rungs %+v, want the own model's 5 samples", e.Prior)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			rung, decided := schemas.RungStrongerModel, schemas.EntryDecision
			if tc.arbiters > 0 {
				rung, decided = schemas.RungPanel, schemas.EntryArbiter
			}
			want := []string{schemas.EntryEscalation + "/" + rung, decided + "/" + rung}
			if !slices.Equal(kinds, want) {
				t.Errorf("journal entries of the hard step %v, want %v", kinds, want)
			}
		})
	}
}

// TestEscalationNeedsHuman: when the judge is not confident enough, the
// step is not decided: the job pauses at it for a person, with no report.
func TestEscalationNeedsHuman(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, hard = 3, 2, 47, 3
	env := fleettest.New(t)
	s := judgetest.TestSettings()
	s.JudgeModel = "judge@lowconf"
	startJudge(t, env, s)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var err error
	env.StartCoordinator(coordinator.Config{})
	seeds := fleettest.SeedTable(jobSeed, 1<<disks-1, 64)
	model := fleettest.NewFakeModel(seeds, splitAt(hard))
	env.StartVoter(model, voter.Config{Concurrency: 4})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.MaxSamplesPerStep = 5
	spec.Escalation = &schemas.EscalationPolicy{Panel: true}
	env.Submit(&spec)

	(&person{t: t, ctx: ctx, env: env, spec: spec, disks: disks}).waitPaused()
	st, err := jobs.Status(ctx, env.Topo, spec.Tenant, spec.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps != hard {
		t.Errorf("paused at step %d, want the undecided step %d", st.Steps, hard)
	}
	if _, err := jobs.Result(ctx, env.Topo, spec.Tenant, spec.JobID); !errors.Is(err, jobs.ErrNotFinished) {
		t.Errorf("result of the paused job: %v, want ErrNotFinished", err)
	}

	// A plain resume asks the panel again, without paying for the rungs
	// below: its stored answer is as unsure as before, so the job pauses
	// again at the same step.
	p := &person{t: t, ctx: ctx, env: env, spec: spec, disks: disks}
	p.control(schemas.ControlRun)
	fleettest.Eventually(t, 20*time.Second, func() bool {
		rec, _, err := jobs.Get(ctx, env.Topo, spec.Tenant, spec.JobID)
		return err == nil && rec.Control == schemas.ControlPause && rec.State == schemas.StatePaused
	}, "the resumed job did not pause again")
	checkOwnAnswered(t, model, hard, 5)

	// A person answers with something the task cannot take: paused again.
	if _, err := jobs.Decide(ctx, env.Topo, spec.Tenant, spec.JobID, schemas.PersonDecision{Step: hard, VoteKey: "not a move", By: "alice"}); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 20*time.Second, func() bool {
		rec, _, err := jobs.Get(ctx, env.Topo, spec.Tenant, spec.JobID)
		st, _ = jobs.Status(ctx, env.Topo, spec.Tenant, spec.JobID)
		return err == nil && rec.Control == schemas.ControlPause && st.State == schemas.StatePaused && st.Steps == hard
	}, "an unusable answer did not pause the job again: %+v", st)

	// Then with the right move: the job runs on from it and solves.
	keys, _ := fleettest.Golden(disks)
	if _, err := jobs.Decide(ctx, env.Topo, spec.Tenant, spec.JobID, schemas.PersonDecision{Step: hard, VoteKey: keys[hard], By: "alice"}); err != nil {
		t.Fatal(err)
	}
	rep := env.Wait(spec)
	// Not checkSolved: the person's step has no votes, so votes per step
	// may fall below k.
	if !rep.Solved || rep.Errors != 0 || rep.Steps != 1<<disks-1 || rep.TraceSHA256 != fleettest.GoldenTrace(disks) {
		t.Errorf("state %s, errors %d, steps %d, trace %s: want solved with the true solution", rep.State, rep.Errors, rep.Steps, rep.TraceSHA256)
	}
	if rep.ArbiterDecisions != 1 || len(rep.ArbiterSteps) != 1 || rep.ArbiterSteps[0] != hard {
		t.Errorf("arbiter decisions %d at %v, want the person's at step %d", rep.ArbiterDecisions, rep.ArbiterSteps, hard)
	}
	var rung string
	err = journal.ReadAll(ctx, env.JS, bus.DefaultNamespace, spec.Tenant, spec.JobID, func(e journal.Entry) error {
		if e.Step == hard && e.Type == schemas.EntryArbiter {
			rung = e.Rung + " " + e.Arbiter.JudgeModel
		}
		return nil
	})
	if err != nil || rung != "person person:alice" {
		t.Errorf("journal entry of step %d: %q, %v; want the person's", hard, rung, err)
	}
}

// checkOwnAnswered fails t unless the job's own model answered step
// exactly n times: its samples were drawn once, never again after an
// escalation, a takeover or a resume.
func checkOwnAnswered(t *testing.T, model *fleettest.FakeModel, step int64, n int) {
	t.Helper()
	own := 0
	for _, r := range model.Records() {
		if r.Known && r.Step == step && r.Model == "" {
			own++
		}
	}
	if own != n {
		t.Errorf("the job's own model answered step %d %d times, want its %d samples once", step, own, n)
	}
}

// panelOf is the test judge's settings with members on every panel.
func panelOf(members []string) judge.Settings {
	s := judgetest.TestSettings()
	for typ := range s.Panels {
		s.Panels[typ] = members
	}
	return s
}

// startJudge runs a judge replica with settings s on env's server, its
// models served by a simulated model of its own.
func startJudge(t *testing.T, env *fleettest.Env, s judge.Settings) {
	t.Helper()
	sim := fleettest.StartSim(t, simllm.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sv, err := judge.New(ctx, env.JS, judge.Config{Settings: s, BaseURL: sim.URL(), Concurrency: 2, SoftStop: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := sv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Stop)
}

// TestEscalationResumesAtItsRung: a step's climb up the ladder is
// journaled, so a coordinator that dies (or hands the job back) while the
// stronger model votes, or while the panel arbitrates, leaves the step on
// that rung: the new owner goes on from there, with the rungs below's
// tallies, and never pays the job's own model for the step again. A
// resumed arbitration reads the panel's answer to the step's one request.
func TestEscalationResumesAtItsRung(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, hard = 3, 2, 47, 3
	cases := []struct {
		name   string
		policy schemas.EscalationPolicy
		kill   bool // else a graceful stop, which checkpoints the rung
	}{
		{"stronger model, owner killed", schemas.EscalationPolicy{StrongerModel: "strong", StrongerSamples: 6}, true},
		{"stronger model, owner stopped", schemas.EscalationPolicy{StrongerModel: "strong", StrongerSamples: 6}, false},
		{"panel, owner killed", schemas.EscalationPolicy{Panel: true}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := fleettest.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			release := make(chan struct{})
			split := splitAt(hard)
			model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
				if c.Model == "strong" && c.Step == hard {
					if err := waitFor(ctx, release); err != nil {
						return llm.Response{}, err
					}
				}
				return split(ctx, c)
			})
			cfg := coordinator.Config{LeaseTTL: time.Second, ScanInterval: 100 * time.Millisecond}
			c1cfg := cfg
			c1cfg.ID = "coordinator-1"
			c1 := env.StartCoordinator(c1cfg)
			env.StartVoter(model, voter.Config{Concurrency: 4})
			spec := fleettest.HanoiSpec(disks, k, jobSeed)
			spec.MaxSamplesPerStep = 5
			pol := tc.policy
			spec.Escalation = &pol
			env.Submit(&spec)

			// Wait until the step is on its upper rung.
			want := schemas.RungStrongerModel
			if pol.StrongerModel == "" {
				want = schemas.RungPanel
			}
			fleettest.Eventually(t, 30*time.Second, func() bool {
				climbed := false
				_ = journal.ReadAll(ctx, env.JS, bus.DefaultNamespace, spec.Tenant, spec.JobID, func(e journal.Entry) error {
					climbed = climbed || e.Type == schemas.EntryEscalation && e.Step == hard && e.Rung == want
					return nil
				})
				if !climbed || want != schemas.RungStrongerModel {
					return climbed
				}
				return model.InFlight() > 0 // the stronger model is voting
			}, "the hard step never reached the %s rung", want)
			if tc.kill {
				c1.Kill()
			} else if err := c1.Stop(); err != nil {
				t.Fatalf("coordinator 1: %v", err)
			}
			close(release)
			c2cfg := cfg
			c2cfg.ID = "coordinator-2"
			env.StartCoordinator(c2cfg)
			if want == schemas.RungPanel {
				startJudge(t, env, panelOf([]string{"m1@dissent", "m2@dissent", "m3"}))
			}

			rep := env.Wait(spec)
			if !rep.Solved || rep.Errors != 0 || rep.TraceSHA256 != fleettest.GoldenTrace(disks) {
				t.Fatalf("state %s, errors %d, trace %s: want solved with the true solution", rep.State, rep.Errors, rep.TraceSHA256)
			}
			checkOwnAnswered(t, model, hard, 5)
			var kinds []string
			err := journal.ReadAll(ctx, env.JS, bus.DefaultNamespace, spec.Tenant, spec.JobID, func(e journal.Entry) error {
				if e.Step != hard || e.Type == schemas.EntryTakeover {
					return nil
				}
				kinds = append(kinds, e.Type+"/"+e.Rung+"/"+e.Owner)
				if len(e.Prior) == 0 || e.Prior[0].Rung != schemas.RungOwnModel || e.Prior[0].Counted != 5 {
					t.Errorf("%s entry of the hard step has prior rungs %+v, want the own model's 5 samples", e.Type, e.Prior)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			decided := schemas.EntryDecision + "/" + want + "/coordinator-2"
			if want == schemas.RungPanel {
				decided = schemas.EntryArbiter + "/" + want + "/coordinator-2"
			}
			if len(kinds) != 2 || kinds[0] != schemas.EntryEscalation+"/"+want+"/coordinator-1" || kinds[1] != decided {
				t.Errorf("journal entries of the hard step %v, want the climb by coordinator-1, then %s", kinds, decided)
			}
		})
	}
}

// TestEscalationNoConsensusReport: a step neither the job's own model nor
// the stronger one can settle, with no panel, ends the job no_consensus;
// the report names the last rung and keeps the tallies of the rungs below,
// and counts every rung's samples.
func TestEscalationNoConsensusReport(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, hard = 3, 2, 47, 3
	env := fleettest.New(t)
	env.StartCoordinator(coordinator.Config{})
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		// Every model splits at the hard step: right, wrong, right, wrong...
		if c.Known && c.Step == hard && (c.Index%2 == 1 || c.Model == "" && c.Index == 4) {
			return fleettest.Say(fleettest.SameMoveWrongState(c)), nil
		}
		return fleettest.Right(c), nil
	})
	env.StartVoter(model, voter.Config{Concurrency: 4})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.MaxSamplesPerStep = 5
	spec.Escalation = &schemas.EscalationPolicy{StrongerModel: "strong", StrongerSamples: 4}

	rep := env.Run(&spec)
	nc := rep.NoConsensus
	if rep.State != schemas.StateNoConsensus || nc == nil {
		t.Fatalf("state %s, no_consensus %+v; want no_consensus", rep.State, nc)
	}
	if nc.Step != hard || nc.Rung != schemas.RungStrongerModel || nc.Samples != 4 || len(nc.Tally) != 2 {
		t.Errorf("no_consensus %+v, want the stronger model's 4 split samples at step %d", nc, hard)
	}
	if len(nc.Prior) != 1 || nc.Prior[0].Rung != schemas.RungOwnModel || nc.Prior[0].Counted != 5 {
		t.Errorf("no_consensus prior %+v, want the own model's 5 samples", nc.Prior)
	}
	if want := "step 3 drew 9 samples on 2 rungs"; !strings.Contains(rep.Reason, want) {
		t.Errorf("reason %q, want it to say %q", rep.Reason, want)
	}
	if rep.Samples != int64(hard*k+9) || rep.Votes+rep.RedFlagged != rep.Samples {
		t.Errorf("samples %d (votes %d, red-flagged %d), want %d: every rung's samples counted", rep.Samples, rep.Votes, rep.RedFlagged, hard*k+9)
	}
}

// TestControlDuringArbitration: an arbitration may wait a long time (the
// judge holds a costly call for a person's approval), but what a person
// asks meanwhile is acted on at once: a cancel ends the job (the samples
// the step drew count as late); a pause stops it on the panel's rung, and
// the resumed job reads the panel's answer; a pause taken back at once
// goes on waiting; a person's answer for the step decides it, paused or
// not. The job's own model is never asked about the step again, and the
// step's samples stay in the report.
func TestControlDuringArbitration(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, hard, ownSamples = 3, 2, 47, 3, 5
	steps := int64(1)<<disks - 1
	cases := []struct {
		name string
		// act runs once the step waits for the panel.
		act func(p *person)
		// state the job ends in; arbiter the rung of the hard step's
		// arbiter entry ("" for none).
		state, arbiter string
	}{
		{"cancel", func(p *person) { p.control(schemas.ControlCancel) }, schemas.StateCancelled, ""},
		{"pause, then resume", func(p *person) {
			p.control(schemas.ControlPause)
			p.waitPaused()
			p.control(schemas.ControlRun)
		}, schemas.StateSolved, schemas.RungPanel},
		{"pause taken back at once", func(p *person) {
			p.control(schemas.ControlPause)
			p.control(schemas.ControlRun)
		}, schemas.StateSolved, schemas.RungPanel},
		{"a person answers", func(p *person) { p.decide(hard) }, schemas.StateSolved, schemas.RungPerson},
		{"pause, then a person answers", func(p *person) {
			p.control(schemas.ControlPause)
			p.waitPaused()
			p.decide(hard)
		}, schemas.StateSolved, schemas.RungPerson},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := fleettest.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			env.StartCoordinator(coordinator.Config{})
			model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), splitAt(hard))
			env.StartVoter(model, voter.Config{Concurrency: 4})
			spec := fleettest.HanoiSpec(disks, k, jobSeed)
			spec.MaxSamplesPerStep = ownSamples
			spec.Escalation = &schemas.EscalationPolicy{Panel: true}
			env.Submit(&spec)

			// No judge runs yet: the arbitration waits.
			fleettest.Eventually(t, 30*time.Second, func() bool {
				st, err := jobs.Status(ctx, env.Topo, spec.Tenant, spec.JobID)
				return err == nil && st.Rung == schemas.RungPanel && st.State == schemas.StateRunning
			}, "the status never said the panel has the step")
			asked := time.Now()
			tc.act(&person{t: t, ctx: ctx, env: env, spec: spec, disks: disks})
			if tc.arbiter == schemas.RungPanel {
				startJudge(t, env, panelOf([]string{"m1@dissent", "m2@dissent", "m3"}))
			}
			rep := env.Wait(spec)
			if d := time.Since(asked); d > 30*time.Second {
				t.Errorf("acted on after %v", d)
			}
			if tc.state == schemas.StateCancelled {
				if rep.State != tc.state || rep.Steps != hard {
					t.Errorf("state %s at step %d, want cancelled at the arbitrated step %d", rep.State, rep.Steps, hard)
				}
				if rep.Samples != hard*k || rep.LateSamples < ownSamples {
					t.Errorf("samples %d, late %d: want %d counted and the step's %d late", rep.Samples, rep.LateSamples, hard*k, ownSamples)
				}
				return
			}
			if !rep.Solved || rep.TraceSHA256 != fleettest.GoldenTrace(disks) || rep.ArbiterDecisions != 1 {
				t.Errorf("state %s, trace %s, arbiter decisions %d: want solved, the step arbitrated", rep.State, rep.TraceSHA256, rep.ArbiterDecisions)
			}
			if want := (steps-1)*k + ownSamples; rep.Samples != want || rep.Votes+rep.RedFlagged != rep.Samples {
				t.Errorf("samples %d (votes %d, red-flagged %d), want %d: the arbitrated step's samples counted once", rep.Samples, rep.Votes, rep.RedFlagged, want)
			}
			checkOwnAnswered(t, model, hard, ownSamples)
			var rung string
			err := journal.ReadAll(ctx, env.JS, bus.DefaultNamespace, spec.Tenant, spec.JobID, func(e journal.Entry) error {
				if e.Step == hard && e.Type == schemas.EntryArbiter {
					rung = e.Rung
				}
				return nil
			})
			if err != nil || rung != tc.arbiter {
				t.Errorf("the hard step's arbiter entry has rung %q (%v), want %q", rung, err, tc.arbiter)
			}
		})
	}
}

// person acts on a running Hanoi job as maker pause, resume, cancel and
// decide do.
type person struct {
	t     *testing.T
	ctx   context.Context
	env   *fleettest.Env
	spec  schemas.JobSpec
	disks int
}

func (p *person) control(c string) {
	p.t.Helper()
	if _, err := jobs.Control(p.ctx, p.env.Topo, p.spec.Tenant, p.spec.JobID, c); err != nil {
		p.t.Fatal(err)
	}
}

// decide answers step with the true move.
func (p *person) decide(step int64) {
	p.t.Helper()
	keys, _ := fleettest.Golden(p.disks)
	if _, err := jobs.Decide(p.ctx, p.env.Topo, p.spec.Tenant, p.spec.JobID, schemas.PersonDecision{Step: step, VoteKey: keys[step], By: "alice"}); err != nil {
		p.t.Fatal(err)
	}
}

func (p *person) waitPaused() {
	p.t.Helper()
	var st schemas.JobStatus
	fleettest.Eventually(p.t, 20*time.Second, func() bool {
		st, _ = jobs.Status(p.ctx, p.env.Topo, p.spec.Tenant, p.spec.JobID)
		return st.State == schemas.StatePaused
	}, "the job did not pause: %+v", st)
}

// TestArbitrationWithoutCandidates: a step whose every sample was
// red-flagged has no candidate for the panel to choose from; the job
// pauses for a person rather than failing.
func TestArbitrationWithoutCandidates(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, hard = 3, 2, 47, 3
	env := fleettest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	startJudge(t, env, judgetest.TestSettings())
	env.StartCoordinator(coordinator.Config{})
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		if c.Known && c.Step == hard {
			return fleettest.Garbage(), nil
		}
		return fleettest.Right(c), nil
	})
	env.StartVoter(model, voter.Config{Concurrency: 4})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.MaxSamplesPerStep = 5
	spec.Escalation = &schemas.EscalationPolicy{Panel: true}
	env.Submit(&spec)
	(&person{t: t, ctx: ctx, env: env, spec: spec, disks: disks}).waitPaused()
	st, _ := jobs.Status(ctx, env.Topo, spec.Tenant, spec.JobID)
	rec, _, err := jobs.Get(ctx, env.Topo, spec.Tenant, spec.JobID)
	if err != nil || rec.Finished || st.Steps != hard {
		t.Errorf("record %+v (%v), status %+v: want the job paused at step %d, not finished", rec, err, st, hard)
	}
}
