package spec_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/task/spec"
)

// example compiles examples/tasks/<name>.
func example(t testing.TB, name string) *spec.Task {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "examples", "tasks", name))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := spec.Compile(src)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tk
}

// TestHanoiSpecIsTheBuiltin: examples/tasks/hanoi.yaml asks the same
// prompts, reads replies the same way, votes on the same keys and moves on
// to the same states as the built-in task, step by step along the whole
// solution, for odd and even disk counts; its reference is the strategy.
func TestHanoiSpecIsTheBuiltin(t *testing.T) {
	tk := example(t, "hanoi.yaml")
	for _, disks := range []int{1, 2, 3, 4, 5, 6} {
		t.Run(fmt.Sprint(disks), func(t *testing.T) {
			params := json.RawMessage(fmt.Sprintf(`{"disks":%d}`, disks))
			si, err := tk.Bind(params)
			if err != nil {
				t.Fatal(err)
			}
			bi, err := hanoi.Task{}.Bind(params)
			if err != nil {
				t.Fatal(err)
			}
			if si.TotalSteps() != bi.TotalSteps() || string(si.Params()) != string(bi.Params()) {
				t.Fatalf("total steps %d, params %s; built-in %d, %s", si.TotalSteps(), si.Params(), bi.TotalSteps(), bi.Params())
			}
			sst, bst := si.Initial(), bi.Initial()
			for step := int64(0); step < bi.TotalSteps(); step++ {
				sp, err := si.Prompt(sst)
				if err != nil {
					t.Fatal(err)
				}
				bp, _ := bi.Prompt(bst)
				if !reflect.DeepEqual(sp, bp) {
					t.Fatalf("step %d prompt:\n%q\nbuilt-in:\n%q", step, sp, bp)
				}
				st, _ := bi.(*hanoi.Instance).DecodeState(bst)
				right, err := hanoi.StrategyMove(st.Pegs, st.Prev, disks)
				if err != nil {
					t.Fatal(err)
				}
				next, _ := hanoi.Apply(st.Pegs, right)
				reply := "Following the strategy.\n\nmove = " + hanoi.FormatMove(right) + "\nnext_state = " + hanoi.FormatPegs(next)
				for _, r := range replies(reply, disks, right, next) {
					sv, serr := si.Parse(sst, r)
					bv, berr := bi.Parse(bst, r)
					if (serr == nil) != (berr == nil) || sv != bv {
						t.Fatalf("step %d reply %q:\nspec     %v %v\nbuilt-in %v %v", step, r, sv, serr, bv, berr)
					}
					if serr != nil && !errors.Is(serr, task.ErrMalformed) {
						t.Errorf("a reply the spec rejects gives %v, want a red flag", serr)
					}
				}
				v, err := si.Parse(sst, reply)
				if err != nil {
					t.Fatal(err)
				}
				ref, _, err := si.(*spec.Instance).Reference(sst)
				if err != nil || ref != v.Key {
					t.Fatalf("step %d: reference %s (%v), the strategy says %s", step, ref, err, v.Key)
				}
				if si.(task.Verifier).Verify(sst, v) != nil || bi.(task.Verifier).Verify(bst, v) != nil {
					t.Fatalf("step %d: the right answer is not verified", step)
				}
				if err := si.(task.Verifier).Verify(sst, task.Vote{Key: wrongKey(right, next)}); !errors.Is(err, task.ErrWrongStep) {
					t.Errorf("step %d: a wrong answer verified: %v", step, err)
				}
				if sst, err = si.Next(sst, v); err != nil {
					t.Fatal(err)
				}
				if bst, err = bi.Next(bst, v); err != nil {
					t.Fatal(err)
				}
				if string(sst) != string(bst) {
					t.Fatalf("step %d next state %s, built-in %s", step, sst, bst)
				}
			}
			if !si.Done(sst) || !bi.Done(bst) {
				t.Errorf("not done after the whole solution")
			}
		})
	}
}

// replies are variations of a right reply: the built-in accepts some and
// red-flags others, and the spec must agree on each.
func replies(right string, n int, mv hanoi.Move, next hanoi.Pegs) []string {
	two := "[" + fmt.Sprint(next[0]) + "]"
	dup := hanoi.FormatPegs(hanoi.Pegs{append([]int{1}, next[0]...), next[1], next[2]})
	return []string{
		right,
		"I think.\nmove = [1, 0, 2]\nnext_state = [[9], [], []]\n" + right, // the last lines count
		right + "\nmove = [" + fmt.Sprint(mv[0]) + ", " + fmt.Sprint(mv[2]) + "]",
		"move = (1, 0, 2)\nnext_state = " + hanoi.FormatPegs(next),
		"move = " + hanoi.FormatMove(mv) + "\nnext_state = " + two,
		"move = " + hanoi.FormatMove(mv) + "\nnext_state = " + dup,
		"move = [" + fmt.Sprint(n+1) + ", 0, 1]\nnext_state = " + hanoi.FormatPegs(next),
		"move = [1, 0, 3]\nnext_state = " + hanoi.FormatPegs(next),
		"move = " + hanoi.FormatMove(mv),
		"no answer at all",
		"move=" + hanoi.FormatMove(mv) + " next_state=" + hanoi.FormatPegs(next),
		"move = [1,0,2]\nnext_state = [[1],[],[]]",
	}
}

func wrongKey(mv hanoi.Move, next hanoi.Pegs) string {
	return hanoi.Answer{Move: hanoi.Move{mv[0], mv[2], mv[1]}, NextState: next}.Key()
}
