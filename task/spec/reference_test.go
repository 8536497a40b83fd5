package spec_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/spec"
)

// chainOf walks in's reference chain from Initial through Next, for at
// most limit steps or until done or the reference says null.
func chainOf(t *testing.T, in task.Instance, limit int64) []task.State {
	t.Helper()
	ref := in.(task.Referencer)
	var out []task.State
	s := in.Initial()
	for int64(len(out)) < limit && !in.Done(s) {
		v, err := ref.ReferenceVote(s)
		if errors.Is(err, task.ErrNoReference) {
			break
		}
		if err != nil {
			t.Fatalf("step %d: ReferenceVote: %v", len(out), err)
		}
		out = append(out, s)
		if s, err = in.Next(s, v); err != nil {
			t.Fatalf("step %d: Next refuses the reference %s: %v", len(out)-1, v.Key, err)
		}
	}
	return out
}

// TestDrawStateOnTheChain: for every example spec (and the counter past
// the draw bound and past a checkpoint), each drawn state is the reference
// chain's state at the drawn step, every step of the chain is drawable,
// and the drawn state's reference vote verifies.
func TestDrawStateOnTheChain(t *testing.T) {
	t.Parallel()
	classifyParams, err := os.ReadFile(examplePath("classify.params.json"))
	if err != nil {
		t.Fatal(err)
	}
	ledgerParams, err := os.ReadFile(examplePath("ledger.params.json"))
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Replace(counter, "maximum: 1000}", "maximum: 100000}", 1)
	cases := []struct {
		name   string
		tk     *spec.Task
		params string
		length int64 // of the drawable chain
	}{
		{"hanoi-spec 3 disks", example(t, "hanoi.yaml"), `{"disks":3}`, 7},
		{"hanoi-spec 4 disks", example(t, "hanoi.yaml"), `{"disks":4}`, 15},
		{"multiply", example(t, "multiply.yaml"), `{"a":"314","b":"27"}`, 9},
		{"ledger", example(t, "ledger.yaml"), string(ledgerParams), -1},
		{"classify", example(t, "classify.yaml"), string(classifyParams), -1},
		{"counter past a checkpoint", compile(t, counter), `{"n":200}`, 200},
		{"counter past the bound", compile(t, big), `{"n":12000}`, spec.MaxDrawSteps},
		{"reference null from step 5", compile(t, strings.Replace(counter, `reference: '{"next": {"i": state.i + 1}}'`,
			`reference: 'state.i < 5 ? dyn({"next": {"i": state.i + 1}}) : null'`, 1)), `{"n":9}`, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in := bind(t, c.tk, c.params)
			chain := chainOf(t, in, spec.MaxDrawSteps)
			if c.length >= 0 && int64(len(chain)) != c.length {
				t.Fatalf("chain of %d steps, want %d", len(chain), c.length)
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(chain))))
			drawn := map[int64]bool{}
			// 12 draws a step miss a given step with chance e^-12: all
			// are hit (the seed is fixed). Long chains: 300 draws.
			draws := max(12*len(chain), 300)
			if len(chain) > 256 {
				draws = 300
			}
			for range draws {
				s, step, err := in.(task.Drawer).DrawState(rng)
				if err != nil {
					t.Fatal(err)
				}
				if step < 0 || step >= int64(len(chain)) {
					t.Fatalf("drew step %d outside the chain's [0, %d)", step, len(chain))
				}
				if string(s) != string(chain[step]) {
					t.Fatalf("step %d: drew %s, the chain has %s", step, s, chain[step])
				}
				v, err := in.(task.Referencer).ReferenceVote(s)
				if err != nil {
					t.Fatal(err)
				}
				if err := in.(task.Verifier).Verify(s, v); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				drawn[step] = true
			}
			if len(chain) <= 256 && len(drawn) != len(chain) {
				t.Errorf("%d draws hit %d of %d steps", draws, len(drawn), len(chain))
			}
		})
	}
}

// TestNoReference: a spec without a reference, or whose reference is null
// from the start, can neither judge nor draw; its errors wrap both
// sentinels.
func TestNoReference(t *testing.T) {
	t.Parallel()
	noRef := compile(t, strings.Replace(counter, `reference: '{"next": {"i": state.i + 1}}'`+"\n", "", 1))
	cases := []struct {
		name string
		in   task.Instance
	}{
		{"no reference expression", bind(t, noRef, `{"n":3}`)},
		{"classify without truth", bind(t, example(t, "classify.yaml"), `{"choices":["a","b"],"records":["x","y"]}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := c.in.(task.Referencer).ReferenceVote(c.in.Initial())
			if !errors.Is(err, task.ErrNoReference) || !errors.Is(err, spec.ErrNoReference) {
				t.Errorf("ReferenceVote: %v, want an error wrapping task.ErrNoReference", err)
			}
			_, _, err = c.in.(task.Drawer).DrawState(rand.New(rand.NewPCG(1, 1)))
			if !errors.Is(err, task.ErrNoReference) {
				t.Errorf("DrawState: %v, want an error wrapping task.ErrNoReference", err)
			}
		})
	}
}

// TestDrawStateConcurrent: one instance serves many draws at once; the
// chain is walked once and every draw sees it.
func TestDrawStateConcurrent(t *testing.T) {
	t.Parallel()
	in := bind(t, compile(t, counter), `{"n":300}`)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 0))
			for range 50 {
				s, step, err := in.(task.Drawer).DrawState(rng)
				if err == nil && string(s) != fmt.Sprintf(`{"i":%d}`, step) {
					err = fmt.Errorf("step %d: state %s", step, s)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestReferenceVoteIsParsesKey(t *testing.T) {
	t.Parallel()
	in := bind(t, compile(t, counter), `{"n":3}`)
	v, err := in.(task.Referencer).ReferenceVote(json.RawMessage(`{"i":1}`))
	if err != nil || v.Key != `{"next":{"i":2}}` {
		t.Fatalf("ReferenceVote = %q, %v", v.Key, err)
	}
	if p, err := in.Parse(json.RawMessage(`{"i":1}`), `{"next": {"i": 2}}`); err != nil || p != v {
		t.Errorf("Parse of the right reply = %q, %v; want %q", p.Key, err, v.Key)
	}
	if _, err := in.(task.Referencer).ReferenceVote(json.RawMessage(`{"i":`)); !errors.Is(err, task.ErrInvalidState) {
		t.Errorf("a broken state: %v, want ErrInvalidState", err)
	}
}
