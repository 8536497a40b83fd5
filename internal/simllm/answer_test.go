package simllm

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

func voteOf(key string) task.Vote { return task.Vote{Key: key} }

func testRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0xabc)) }

func answerText(st *step, m hanoi.Move, next hanoi.Pegs) string {
	var b strings.Builder
	st.writeAnswer(&b, testRNG(1), m, next)
	return b.String()
}

// stepsFor returns the sim's reading of the prompts along a run.
func stepsFor(t *testing.T, in *hanoi.Instance, limit int) ([]task.State, []*step) {
	t.Helper()
	states := walk(t, in, limit)
	steps := make([]*step, len(states))
	for i, s := range states {
		p, ok := readPrompt(texts(t, in, s))
		if !ok {
			t.Fatalf("step %d not recognised", i)
		}
		if steps[i], ok = newStep(p); !ok {
			t.Fatalf("step %d not solvable", i)
		}
	}
	return states, steps
}

// Every kind of wrong answer parses yet fails Verify; every right answer
// passes; every kind of malformed answer fails the strict parser.
func TestAnswerKindsAgainstHanoi(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 4, 5, 10} {
		in := mustInstance(t, n)
		states, steps := stepsFor(t, in, 64)
		for i, st := range steps {
			s := states[i]
			rng := testRNG(uint64(i))

			right := answerText(st, st.right, st.next)
			v, err := in.Parse(s, right)
			if err != nil {
				t.Fatalf("n=%d step %d: right answer does not parse: %v\n%s", n, i, err, right)
			}
			if err := in.Verify(s, v); err != nil {
				t.Fatalf("n=%d step %d: right answer fails Verify: %v", n, i, err)
			}

			for k := range numWrong {
				m, next := st.wrongKind(rng, k)
				txt := answerText(st, m, next)
				v, err := in.Parse(s, txt)
				if err != nil {
					t.Fatalf("n=%d step %d wrong kind %d: does not parse: %v\n%s", n, i, k, err, txt)
				}
				if err := in.Verify(s, v); !errors.Is(err, task.ErrWrongStep) {
					t.Fatalf("n=%d step %d wrong kind %d: Verify = %v, want ErrWrongStep\n%s", n, i, k, err, txt)
				}
			}

			for k := range numMalformed {
				var b strings.Builder
				st.writeMalformedKind(&b, rng, k)
				if _, err := in.Parse(s, b.String()); !errors.Is(err, task.ErrMalformed) {
					t.Fatalf("n=%d step %d malformed kind %d: Parse = %v, want ErrMalformed\n%s", n, i, k, err, b.String())
				}
			}
		}
	}
}

// Wrong votes spread over several candidates, so voting sees a realistic
// field rather than one fixed rival.
func TestWrongAnswersSpread(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 4)
	_, steps := stepsFor(t, in, 8)
	for i, st := range steps {
		keys := map[string]bool{}
		rng := testRNG(uint64(i))
		for range 200 {
			m, next := st.wrong(rng, 0)
			keys[hanoi.Answer{Move: m, NextState: next}.Key()] = true
		}
		if len(keys) < 4 {
			t.Errorf("step %d: wrong answers cover %d candidates, want >= 4: %v", i, len(keys), keys)
		}
	}
}

// Reasoning is short, varied and never holds "=" (which could confuse the
// parser); replies stay within the 20-80 token band.
func TestReasoningLengthAndVariety(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 6)
	_, steps := stepsFor(t, in, 10)
	seen := map[string]bool{}
	for i, st := range steps {
		for j := range 20 {
			var b strings.Builder
			st.writeReasoning(&b, testRNG(uint64(i*100+j)), st.right)
			r := b.String()
			if strings.Contains(r, "=") {
				t.Fatalf("reasoning holds '=': %q", r)
			}
			seen[r] = true
			full := answerText(st, st.right, st.next)
			if tok := tokenCount(full); tok < 20 || tok > 80 {
				t.Errorf("reply has %d tokens, want 20..80: %q", tok, full)
			}
		}
	}
	if len(seen) < 50 {
		t.Errorf("only %d distinct reasonings over 200 draws", len(seen))
	}
}

func TestOverlongText(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 3)
	_, steps := stepsFor(t, in, 1)
	for _, limit := range []int{0, 1, 7, 750, 2000} {
		c := overlong(testRNG(uint64(limit)), steps[0], limit)
		want := limit
		if limit == 0 {
			want = OverlongTokens
		}
		if c.finish != "length" || c.tokens != want || len(c.content) != 4*want || c.outcome != outOverlong {
			t.Errorf("limit %d: finish %q tokens %d len %d outcome %d", limit, c.finish, c.tokens, len(c.content), c.outcome)
		}
	}
}
