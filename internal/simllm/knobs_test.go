package simllm

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// Tests of the error-model knobs: Config.WrongSpread, Config.HardFraction
// and Config.HardAccuracy.

// checkBinomial fails t unless k successes in n trials fit a success
// chance of p: within 4.5 standard deviations, plus one for rounding. A
// correct model fails that about once in 150,000 seeds (and the seeds are
// fixed); a rate off by a few points fails it at the sample sizes used
// here.
func checkBinomial(t *testing.T, name string, k, n int, p float64) {
	t.Helper()
	if n == 0 {
		t.Fatalf("%s: no trials", name)
	}
	mean := float64(n) * p
	tol := 4.5*math.Sqrt(float64(n)*p*(1-p)) + 1
	if math.Abs(float64(k)-mean) > tol {
		t.Errorf("%s: %d of %d (%.4f), want %.4f ± %.4f", name, k, n, float64(k)/float64(n), p, tol/float64(n))
	}
}

// hanoiVotes sends requests for the prompt of s, each with 16 choices and
// its own seed (from seed0 on), plus extra fields; it returns the right
// count and the wrong answers' vote keys, and fails on anything not a vote
// (these tests' configs make neither malformed nor overlong replies).
func hanoiVotes(t *testing.T, srv *Server, in *hanoi.Instance, s task.State, requests, seed0 int, extra map[string]any) (right int, wrong []string) {
	t.Helper()
	for r := range requests {
		req := map[string]any{"seed": seed0 + r, "n": 16, "temperature": 0.1}
		for k, v := range extra {
			req[k] = v
		}
		for _, c := range mustChat(t, srv, chatBody(t, in, s, req)).Choices {
			v, err := in.Parse(s, c.Message.Content)
			if err != nil || c.FinishReason != "stop" {
				t.Fatalf("finish %q, Parse: %v; want a vote\n%s", c.FinishReason, err, c.Message.Content)
			}
			switch err := in.Verify(s, v); {
			case err == nil:
				right++
			case errors.Is(err, task.ErrWrongStep):
				wrong = append(wrong, v.Key)
			default:
				t.Fatalf("Verify: %v", err)
			}
		}
	}
	return right, wrong
}

// distinct returns the distinct keys of keys, sorted.
func distinct(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}

// candidateKeys are the vote keys of the first n of a step's wrong
// candidates (all of them for n <= 0), sorted.
func candidateKeys(st *step, n int) []string {
	cands := st.wrongCandidates()
	if n > 0 && n < len(cands) {
		cands = cands[:n]
	}
	var out []string
	for _, c := range cands {
		out = append(out, hanoi.Answer{Move: c.m, NextState: c.next}.Key())
	}
	return distinct(out)
}

// TestWrongSpread: over many samples of a step (different request seeds),
// spread 1 gives one wrong answer only, spread N exactly the first N
// candidates, and spread 0 every kind; none changes how often an answer is
// right.
func TestWrongSpread(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 6)
	states, steps := stepsFor(t, in, 64)
	picks := []int{0, 7, 22, 45} // the first move, disk 1's moves and the others'
	const (
		accuracy = 0.25
		requests = 10 // × 16 choices a step: ~120 wrong answers each
	)
	for _, spread := range []int{0, 1, 2, 3, 100} {
		t.Run(fmt.Sprint("spread=", spread), func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, Config{Accuracy: accuracy, Seed: 7, WrongSpread: spread})
			right, total := 0, 0
			for _, i := range picks {
				s, st := states[i], steps[i]
				r, wrong := hanoiVotes(t, srv, in, s, requests, 1000*i, nil)
				right += r
				total += r + len(wrong)
				got, all := distinct(wrong), candidateKeys(st, 0)
				if len(all) < 4 {
					t.Fatalf("step %d has %d wrong candidates, want at least 4: %v", i, len(all), all)
				}
				switch {
				case spread == 0:
					// The old behaviour: every kind of wrong answer.
					if !slices.Equal(got, all) {
						t.Errorf("step %d: %d distinct wrong answers %v, want all %d candidates %v", i, len(got), got, len(all), all)
					}
				case spread == 1:
					// The reversed move with the right state, every time.
					m := st.right
					want := hanoi.Answer{Move: hanoi.Move{m[0], m[2], m[1]}, NextState: st.next}.Key()
					if len(got) != 1 || got[0] != want {
						t.Errorf("step %d: wrong answers %v, want only %s", i, got, want)
					}
				default:
					want := candidateKeys(st, spread)
					if len(got) > spread || !slices.Equal(got, want) {
						t.Errorf("step %d: %d distinct wrong answers %v, want the first %d candidates %v", i, len(got), got, min(spread, len(all)), want)
					}
				}
				if spread != 1 && len(got) < 2 {
					t.Errorf("step %d: only %d distinct wrong answers in %d", i, len(got), len(wrong))
				}
			}
			checkBinomial(t, "right answers", right, total, accuracy)
			if st := srv.Stats(); st.Correct != int64(right) || st.Wrong != int64(total-right) {
				t.Errorf("stats %d right, %d wrong; the parser says %d, %d", st.Correct, st.Wrong, right, total-right)
			}
		})
	}
}

// TestWrongSpreadOneAtAnyTemperature: spread 1's single wrong answer holds
// for samples at any temperature, with or without a seed, and for every
// step of a run.
func TestWrongSpreadOneAtAnyTemperature(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 4)
	states, steps := stepsFor(t, in, 15)
	srv := newServer(t, Config{Accuracy: 0.3, Seed: 3, WrongSpread: 1})
	for i, s := range states {
		var wrong []string
		for _, temp := range []any{0.1, 0.7, 1.3, nil} {
			_, w := hanoiVotes(t, srv, in, s, 1, 10*i, map[string]any{"temperature": temp})
			wrong = append(wrong, w...)
		}
		_, w := hanoiVotes(t, srv, in, s, 1, 0, map[string]any{"seed": nil})
		wrong = append(wrong, w...)
		if got, want := distinct(wrong), candidateKeys(steps[i], 1); len(wrong) == 0 || !slices.Equal(got, want) {
			t.Errorf("step %d: wrong answers %v (of %d), want only %v", i, got, len(wrong), want)
		}
	}
}

// msgHash is the hash the server keys a request's step by.
func msgHash(t *testing.T, body string) uint64 {
	t.Helper()
	req, aerr := decodeRequest([]byte(body))
	if aerr == nil {
		aerr = req.validate()
	}
	if aerr != nil {
		t.Fatalf("request: %s", aerr.message)
	}
	return req.msgHash
}

// stepHashes are the hashes the server keys the steps of states by.
func stepHashes(t *testing.T, in *hanoi.Instance, states []task.State) []uint64 {
	t.Helper()
	out := make([]uint64, len(states))
	for i, s := range states {
		out[i] = msgHash(t, chatBody(t, in, s, map[string]any{"seed": 1}))
	}
	return out
}

// hardSteps returns which of the steps srv answers as hard ones.
func hardSteps(t *testing.T, srv *Server, hashes []uint64) []bool {
	t.Helper()
	out := make([]bool, len(hashes))
	for i, h := range hashes {
		switch a := srv.accuracy(h); a {
		case srv.cfg.HardAccuracy:
			out[i] = true
		case srv.cfg.Accuracy:
		default:
			t.Fatalf("step %d: accuracy %v, neither %v nor the hard %v", i, a, srv.cfg.Accuracy, srv.cfg.HardAccuracy)
		}
	}
	return out
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// TestHardStepShare: HardFraction of the steps are hard, chosen per step
// by Config.Seed and the prompt alone: never by the request's seed,
// temperature, n, model or token limit.
func TestHardStepShare(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 10)
	states := walk(t, in, 2000) // all 1023 steps
	hashes := stepHashes(t, in, states)
	cfg := Config{Accuracy: 0.95, HardFraction: 0.2, HardAccuracy: 0.5, Seed: 9}
	srv := newServer(t, cfg)
	hard := hardSteps(t, srv, hashes)
	checkBinomial(t, "hard steps", count(hard), len(states), cfg.HardFraction)

	// Every sample of a step agrees: the request's other fields do not
	// enter the step's hash.
	for i := 0; i < len(states); i += 9 {
		for _, extra := range []map[string]any{
			{"seed": 2, "temperature": 0.1},
			{"seed": 99, "temperature": 1.5, "n": 7, "model": "gpt-4.1-mini", "max_tokens": 300},
			{"temperature": 0},
			{},
		} {
			if h := msgHash(t, chatBody(t, in, states[i], extra)); h != hashes[i] {
				t.Fatalf("step %d with %v: hash %x, with seed 1 %x", i, extra, h, hashes[i])
			}
		}
	}
	// Different steps have different hashes.
	seen := make(map[uint64]bool, len(hashes))
	for _, h := range hashes {
		seen[h] = true
	}
	if len(seen) != len(states) {
		t.Errorf("%d steps have %d distinct hashes", len(states), len(seen))
	}

	// The same model picks the same steps; another seed other ones, as
	// many.
	if again := hardSteps(t, newServer(t, cfg), hashes); !slices.Equal(again, hard) {
		t.Error("a second server with the same config picks other hard steps")
	}
	cfg.Seed = 10
	other := hardSteps(t, newServer(t, cfg), hashes)
	checkBinomial(t, "hard steps with another seed", count(other), len(states), cfg.HardFraction)
	if slices.Equal(other, hard) {
		t.Error("Config.Seed does not change which steps are hard")
	}

	for _, f := range []float64{0, 1} {
		got := count(hardSteps(t, newServer(t, Config{Accuracy: 0.95, HardFraction: f, HardAccuracy: 0.5}), hashes))
		if want := int(f) * len(states); got != want {
			t.Errorf("HardFraction %v: %d hard steps, want %d", f, got, want)
		}
	}
}

// TestHardStepAccuracy: hard steps are answered right at HardAccuracy,
// the others at Accuracy.
func TestHardStepAccuracy(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 10)
	states := walk(t, in, 128)
	hashes := stepHashes(t, in, states)

	t.Run("perfect easy steps", func(t *testing.T) {
		t.Parallel()
		// Accuracy 1: exactly the hard steps ever answer wrong (a hard
		// step right 16 times out of 16 at 0.3: 4e-9).
		srv := newServer(t, Config{Accuracy: 1, HardFraction: 0.25, HardAccuracy: 0.3, Seed: 4})
		hard := hardSteps(t, srv, hashes)
		checkBinomial(t, "hard steps", count(hard), len(states), 0.25)
		right, total := 0, 0
		for i, s := range states {
			r, wrong := hanoiVotes(t, srv, in, s, 1, 100*i, nil)
			if (len(wrong) > 0) != hard[i] {
				t.Errorf("step %d: hard %v, but %d wrong answers of %d", i, hard[i], len(wrong), r+len(wrong))
			}
			if hard[i] {
				right += r
				total += r + len(wrong)
			}
		}
		checkBinomial(t, "right answers on hard steps", right, total, 0.3)
	})

	t.Run("both rates", func(t *testing.T) {
		t.Parallel()
		cfg := Config{Accuracy: 0.9, HardFraction: 0.3, HardAccuracy: 0.3, Seed: 5}
		srv := newServer(t, cfg)
		hard := hardSteps(t, srv, hashes)
		var right, total [2]int // easy, hard
		for i, s := range states {
			r, wrong := hanoiVotes(t, srv, in, s, 1, 100*i, nil)
			h := 0
			if hard[i] {
				h = 1
			}
			right[h] += r
			total[h] += r + len(wrong)
		}
		checkBinomial(t, "right answers on easy steps", right[0], total[0], cfg.Accuracy)
		checkBinomial(t, "right answers on hard steps", right[1], total[1], cfg.HardAccuracy)
	})
}

// TestKnobsValidate: the knobs' ranges, each refused with a clear error.
func TestKnobsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{"spread 1", Config{WrongSpread: 1}, ""},
		{"spread large", Config{WrongSpread: 1 << 20}, ""},
		{"negative spread", Config{WrongSpread: -1}, "negative WrongSpread -1"},
		{"hard steps", Config{HardFraction: 0.01, HardAccuracy: 0.6}, ""},
		{"every step hard", Config{HardFraction: 1, HardAccuracy: 1}, ""},
		{"hard accuracy alone", Config{HardAccuracy: 0.5}, ""},
		{"fraction below 0", Config{HardFraction: -0.1, HardAccuracy: 0.5}, "HardFraction -0.1 outside [0, 1]"},
		{"fraction above 1", Config{HardFraction: 1.5, HardAccuracy: 0.5}, "HardFraction 1.5 outside [0, 1]"},
		{"fraction NaN", Config{HardFraction: math.NaN(), HardAccuracy: 0.5}, "HardFraction NaN outside [0, 1]"},
		{"fraction infinite", Config{HardFraction: math.Inf(1), HardAccuracy: 0.5}, "HardFraction +Inf outside [0, 1]"},
		{"accuracy above 1", Config{HardFraction: 0.1, HardAccuracy: 1.2}, "HardAccuracy 1.2 outside [0, 1]"},
		{"accuracy below 0", Config{HardFraction: 0.1, HardAccuracy: -0.5}, "HardAccuracy -0.5 outside [0, 1]"},
		{"accuracy NaN", Config{HardFraction: 0.1, HardAccuracy: math.NaN()}, "HardAccuracy NaN outside [0, 1]"},
		{"accuracy 0", Config{HardFraction: 0.1}, "HardFraction needs a HardAccuracy above 0"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.want)
		}
		if _, nerr := New(tt.cfg); (nerr == nil) != (err == nil) {
			t.Errorf("%s: New and Validate disagree: %v vs %v", tt.name, nerr, err)
		}
	}

	// Every problem at once.
	err := Config{WrongSpread: -2, HardFraction: 2, HardAccuracy: -1}.Validate()
	for _, want := range []string{"negative WrongSpread -2", "HardFraction 2 outside", "HardAccuracy -1 outside"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to contain %q", err, want)
		}
	}
}
