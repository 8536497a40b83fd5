package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/task"
)

// FuzzCompile: any bytes are either a task or a list of problems, each
// with a path; never a panic.
func FuzzCompile(f *testing.F) {
	for _, name := range []string{"hanoi.yaml", "multiply.yaml", "ledger.yaml", "classify.yaml"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "examples", "tasks", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte(`{"name": "x", "version": "1"}`))
	f.Add([]byte("name: [x\n  y: :"))
	f.Fuzz(func(t *testing.T, src []byte) {
		tk, err := Compile(src)
		if err == nil {
			if tk.Hash() != Hash(src) {
				t.Fatalf("hash %s, want %s", tk.Hash(), Hash(src))
			}
			return
		}
		var probs Errors
		if !errors.As(err, &probs) || !errors.Is(err, ErrInvalid) || len(probs) == 0 {
			t.Fatalf("Compile error %v (%T) is not a list of problems", err, err)
		}
	})
}

// FuzzParse: any reply to any of the examples' first states is a vote or
// a red flag; never a panic, never an error of another kind.
func FuzzParse(f *testing.F) {
	type bound struct {
		in *Instance
		st task.State
	}
	var tasks []bound
	for _, ex := range []struct{ name, params string }{
		{"hanoi.yaml", `{"disks": 4}`}, {"multiply.yaml", `{"a": "1234", "b": "5678"}`},
		{"ledger.yaml", ""}, {"classify.yaml", ""},
	} {
		src, err := os.ReadFile(filepath.Join("..", "..", "examples", "tasks", ex.name))
		if err != nil {
			f.Fatal(err)
		}
		params := []byte(ex.params)
		if ex.params == "" {
			stem := strings.TrimSuffix(ex.name, ".yaml")
			if params, err = os.ReadFile(filepath.Join("..", "..", "examples", "tasks", stem+".params.json")); err != nil {
				f.Fatal(err)
			}
		}
		tk, err := Compile(src)
		if err != nil {
			f.Fatal(err)
		}
		in, err := tk.bind(params)
		if err != nil {
			f.Fatal(err)
		}
		tasks = append(tasks, bound{in, in.Initial()})
		// A right answer, as the task itself would write it.
		if _, ans, err := in.Reference(in.Initial()); err == nil {
			if reply, err := in.Render(in.Initial(), ans); err == nil {
				f.Add(uint8(len(tasks)-1), reply)
			}
		}
	}
	f.Add(uint8(0), `move = [1, 0, 2]`)
	f.Add(uint8(1), `{"digit": 12, "carry": -1}`)
	f.Add(uint8(3), "{\"label\": \"x\"} {\"label\": {\"a\": [1, 2]}}")
	f.Fuzz(func(t *testing.T, which uint8, reply string) {
		b := tasks[int(which)%len(tasks)]
		v, err := b.in.Parse(b.st, reply)
		if err == nil {
			if v.Key == "" {
				t.Fatal("a vote with no key")
			}
			return
		}
		var rf *task.RedFlag
		if !errors.Is(err, task.ErrMalformed) && !errors.As(err, &rf) {
			t.Fatalf("Parse(%q): %v is neither malformed nor a red flag", reply, err)
		}
	})
}
