package spec_test

import (
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/spec"
)

// examplePath is examples/tasks/<name>.
func examplePath(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "tasks", name)
}

// walk runs in from its initial state on reference answers, each written
// as a reply by the answer's render template and read back by Parse, until
// it is done; it returns the final state and the steps taken.
func walk(t *testing.T, in task.Instance) (task.State, int64) {
	t.Helper()
	si := in.(*spec.Instance)
	st := in.Initial()
	var steps int64
	for ; !in.Done(st); steps++ {
		if steps >= in.TotalSteps() {
			t.Fatalf("not done after %d steps", steps)
		}
		if _, err := in.Prompt(st); err != nil {
			t.Fatalf("step %d: prompt: %v", steps, err)
		}
		key, ans, err := si.Reference(st)
		if err != nil {
			t.Fatalf("step %d: reference: %v", steps, err)
		}
		reply, err := si.Render(st, ans)
		if err != nil {
			t.Fatalf("step %d: render: %v", steps, err)
		}
		v, err := in.Parse(st, reply)
		if err != nil || v.Key != key {
			t.Fatalf("step %d: the reference's own reply %q reads as %v, %v; want %s", steps, reply, v, err, key)
		}
		if err := in.(task.Verifier).Verify(st, v); err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		// Every wrong answer the simulated model would give reads as a
		// vote for another candidate, each candidate once.
		wrong, err := si.Wrong(st)
		if err != nil {
			t.Fatalf("step %d: wrong answers: %v", steps, err)
		}
		seen := map[string]bool{}
		for _, w := range wrong {
			r, err := si.Render(st, w)
			if err != nil {
				t.Fatal(err)
			}
			wv, err := in.Parse(st, r)
			if err != nil || wv.Key == key || seen[wv.Key] {
				t.Fatalf("step %d: a wrong answer %q reads as %v, %v: want a vote for another candidate, once", steps, r, wv, err)
			}
			seen[wv.Key] = true
		}
		if st, err = in.Next(st, v); err != nil {
			t.Fatalf("step %d: next: %v", steps, err)
		}
	}
	return st, steps
}

func bind(t *testing.T, tk *spec.Task, params string) task.Instance {
	t.Helper()
	in, err := tk.Bind(json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestExampleMultiply: the product, digit by digit, is a × b.
func TestExampleMultiply(t *testing.T) {
	tk := example(t, "multiply.yaml")
	for _, c := range [][2]string{{"7", "8"}, {"99", "99"}, {"31415926", "27182818"}, {"1000", "1"}, {"0", "12345"}, {"123456789012345678901234567890", "987654321098765432109876543210"}} {
		in := bind(t, tk, `{"a":"`+c[0]+`","b":"`+c[1]+`"}`)
		st, steps := walk(t, in)
		if want := int64(len(c[0]) * (len(c[1]) + 1)); steps != want || in.TotalSteps() != want {
			t.Errorf("%s × %s: %d steps of %d, want %d", c[0], c[1], steps, in.TotalSteps(), want)
		}
		var s struct{ Acc []int }
		if err := json.Unmarshal(st, &s); err != nil {
			t.Fatal(err)
		}
		var digits strings.Builder
		for i := len(s.Acc) - 1; i >= 0; i-- {
			digits.WriteByte(byte('0' + s.Acc[i]))
		}
		a, _ := new(big.Int).SetString(c[0], 10)
		b, _ := new(big.Int).SetString(c[1], 10)
		got, _ := new(big.Int).SetString(digits.String(), 10)
		want := new(big.Int).Mul(a, b)
		if got.Cmp(want) != 0 {
			t.Errorf("%s × %s = %s, want %s", c[0], c[1], got, want)
		}
		// The result expression reads the product the way people write it.
		res, err := in.(task.Resulter).Result(st)
		if err != nil || string(res) != `"`+want.String()+`"` {
			t.Errorf("%s × %s: result %s (%v), want %q", c[0], c[1], res, err, want.String())
		}
	}
	raw, err := os.ReadFile(examplePath("ledger.params.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bind(t, example(t, "ledger.yaml"), string(raw)).(task.Resulter).Result(nil); !errors.Is(err, task.ErrNoResult) {
		t.Errorf("a spec without result: %v, want ErrNoResult", err)
	}
	if _, err := tk.Bind(json.RawMessage(`{"a":"12x","b":"3"}`)); !errors.Is(err, task.ErrInvalidParams) {
		t.Errorf("a non-digit: %v", err)
	}
}

// TestExampleLedger: the closing balances are the transfers applied in
// order, a transfer the payer cannot cover declined; money is kept.
func TestExampleLedger(t *testing.T) {
	tk := example(t, "ledger.yaml")
	raw, err := os.ReadFile(examplePath("ledger.params.json"))
	if err != nil {
		t.Fatal(err)
	}
	in := bind(t, tk, string(raw))
	st, steps := walk(t, in)
	var p struct {
		Balances  map[string]int64
		Transfers []struct {
			From, To string
			Amount   int64
		}
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	for _, tr := range p.Transfers {
		if tr.From != tr.To && p.Balances[tr.From] >= tr.Amount {
			p.Balances[tr.From] -= tr.Amount
			p.Balances[tr.To] += tr.Amount
		}
	}
	var got struct{ Balances map[string]int64 }
	if err := json.Unmarshal(st, &got); err != nil {
		t.Fatal(err)
	}
	if steps != int64(len(p.Transfers)) || len(got.Balances) != len(p.Balances) {
		t.Fatalf("%d steps, balances %v", steps, got.Balances)
	}
	for k, v := range p.Balances {
		if got.Balances[k] != v {
			t.Errorf("%s: %d, want %d", k, got.Balances[k], v)
		}
	}
	// A reply that makes money is a red flag, not a vote.
	first := in.Initial()
	if _, err := in.Parse(first, `{"status":"applied","from_balance":8800,"to_balance":9999}`); !isRedFlag(err, "money_not_kept") {
		t.Errorf("money made: %v, want red flag money_not_kept", err)
	}
	// A transfer naming an unknown account is refused at bind.
	if _, err := tk.Bind(json.RawMessage(`{"balances":{"a":1},"transfers":[{"from":"a","to":"zed","amount":1}]}`)); !errors.Is(err, task.ErrInvalidParams) ||
		!strings.Contains(err.Error(), "unknown_account") {
		t.Errorf("unknown account: %v", err)
	}
}

// TestExampleClassify: each record gets its true label; a label outside
// the choices is a red flag; without truth nothing is counted wrong.
func TestExampleClassify(t *testing.T) {
	tk := example(t, "classify.yaml")
	raw, err := os.ReadFile(examplePath("classify.params.json"))
	if err != nil {
		t.Fatal(err)
	}
	in := bind(t, tk, string(raw))
	st, _ := walk(t, in)
	var got struct{ Labels []string }
	var p struct{ Truth []string }
	_ = json.Unmarshal(st, &got)
	_ = json.Unmarshal(raw, &p)
	if strings.Join(got.Labels, ",") != strings.Join(p.Truth, ",") {
		t.Errorf("labels %v, want %v", got.Labels, p.Truth)
	}
	if _, err := in.Parse(in.Initial(), `{"label": "angry"}`); !isRedFlag(err, "unknown_label") {
		t.Errorf("an unknown label: %v", err)
	}
	blind := bind(t, tk, `{"choices":["a","b"],"records":["x","y"]}`)
	if err := blind.(task.Verifier).Verify(blind.Initial(), task.Vote{Key: `{"label":"b"}`}); err != nil {
		t.Errorf("without truth: %v, want nothing wrong", err)
	}
}

// TestExampleHanoiWalks: the hanoi spec walks to the goal on its own
// reference, through its render template.
func TestExampleHanoiWalks(t *testing.T) {
	tk := example(t, "hanoi.yaml")
	for _, n := range []string{"3", "4"} {
		in := bind(t, tk, `{"disks":`+n+`}`)
		if _, steps := walk(t, in); steps != in.TotalSteps() {
			t.Errorf("%s disks: %d steps, want %d", n, steps, in.TotalSteps())
		}
	}
}

func isRedFlag(err error, reason string) bool {
	var rf *task.RedFlag
	return errors.As(err, &rf) && rf.Reason == reason
}
