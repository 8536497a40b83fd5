package e2e

import (
	"encoding/json"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// exampleTask is the path of an example task spec file.
func exampleTask(t *testing.T, name string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "examples", "tasks", name)
}

// specFleet is a fleet of processes that runs task specs: the simulated
// model answers the specs registered with the fleet (--nats) for voters
// that say which step a request is (--sim-hints).
type specFleet struct {
	*services
	model *sim
}

func startSpecFleet(t *testing.T, accuracy string) *specFleet {
	t.Helper()
	svc := startServices(t, true)
	model := startSim(t, "simllm", "--accuracy", accuracy, "--seed", "7", "--nats", svc.natsURL)
	coord := svc.startCoordinator(t, "coordinator")
	v1 := svc.startVoter(t, "voter-1", model.url, "--concurrency", "4", "--sim-hints")
	v2 := svc.startVoter(t, "voter-2", model.url, "--concurrency", "4", "--sim-hints")
	svc.waitFleet(t, coord, v1, v2)
	return &specFleet{services: svc, model: model}
}

// register registers an example spec with `maker task register`.
func (f *specFleet) register(t *testing.T, file string) {
	t.Helper()
	res := runMaker(t, 30*time.Second, "task", "register", exampleTask(t, file), "--nats", f.natsURL, "--by", "e2e")
	if res.code != 0 {
		t.Fatalf("task register %s exited %d: %s", file, res.code, res.stderr)
	}
}

// submit submits a job of task with params (JSON, or @FILE) and waits for
// its report.
func (f *specFleet) submit(t *testing.T, taskRef, params string, k int, extra ...string) schemas.JobReport {
	t.Helper()
	args := append([]string{"submit", "--nats", f.natsURL, "--task", taskRef, "--params", params,
		"--k", strconv.Itoa(k), "--seed", "7", "--wait", "--json", "--timeout", "100s"}, extra...)
	res := runMaker(t, 120*time.Second, args...)
	if res.code != 0 {
		t.Fatalf("submit %s exited %d: %s", taskRef, res.code, res.stderr)
	}
	rep := parseReport(t, res.stdout)
	if rep.State != schemas.StateSolved || !rep.Solved || rep.Errors != 0 {
		t.Fatalf("%s: state %s, solved %v, %d wrong steps: %s", taskRef, rep.State, rep.Solved, rep.Errors, rep.Reason)
	}
	checkAccounting(t, rep)
	return rep
}

// finalState decodes a report's final state into v.
func finalState(t *testing.T, rep schemas.JobReport, v any) {
	t.Helper()
	if err := json.Unmarshal(rep.FinalState, v); err != nil {
		t.Fatalf("final_state %s: %v", rep.FinalState, err)
	}
}

// TestTaskSpecHanoiSameTrace: examples/tasks/hanoi.yaml, registered with a
// fleet of processes, decides the very steps the built-in Go task does for
// the same seed, for an odd and an even number of disks (disk 1 cycles
// the other way), and both are the true solution.
func TestTaskSpecHanoiSameTrace(t *testing.T) {
	f := startSpecFleet(t, "0.9")
	f.register(t, "hanoi.yaml")
	for _, disks := range []int{5, 6} {
		params := `{"disks":` + strconv.Itoa(disks) + `}`
		spec := f.submit(t, "hanoi-spec@1.0.0", params, 3)
		builtin := f.submit(t, "hanoi", params, 3)
		if spec.TraceSHA256 != builtin.TraceSHA256 || spec.TraceSHA256 != goldenTrace(t, disks) {
			t.Errorf("%d disks: spec trace %s, built-in %s, true solution %s", disks, spec.TraceSHA256, builtin.TraceSHA256, goldenTrace(t, disks))
		}
		if spec.Samples != builtin.Samples || spec.Steps != builtin.Steps {
			t.Errorf("%d disks: spec drew %d samples over %d steps, built-in %d over %d", disks, spec.Samples, spec.Steps, builtin.Samples, builtin.Steps)
		}
		if spec.Task != "hanoi-spec" || spec.TaskVersion != "1.0.0" || !strings.HasPrefix(spec.TaskHash, "sha256:") {
			t.Errorf("the report does not pin the spec: task %q version %q hash %q", spec.Task, spec.TaskVersion, spec.TaskHash)
		}
		if builtin.TaskVersion != "" || builtin.TaskHash != "" {
			t.Errorf("a built-in job's report names a spec version %q or hash %q", builtin.TaskVersion, builtin.TaskHash)
		}
	}
}

// TestTaskSpecExamplesOnFleet: the other three examples, registered with
// `maker task register`, run to solved jobs on a fleet of processes, and
// their final states are the right results, checked here independently
// of the specs: the product, the closing balances, every record's label.
func TestTaskSpecExamplesOnFleet(t *testing.T) {
	f := startSpecFleet(t, "0.85")
	for _, file := range []string{"multiply.yaml", "ledger.yaml", "classify.yaml"} {
		f.register(t, file)
	}

	t.Run("multiply", func(t *testing.T) {
		const a, b = "31415926", "2718281"
		rep := f.submit(t, "multiply", `{"a":"`+a+`","b":"`+b+`"}`, 3)
		if want := int64(len(a) * (len(b) + 1)); rep.Steps != want {
			t.Errorf("%d steps, want len(a)*(len(b)+1) = %d", rep.Steps, want)
		}
		var st struct{ Acc []int }
		finalState(t, rep, &st)
		var digits strings.Builder
		for i := len(st.Acc) - 1; i >= 0; i-- {
			digits.WriteString(strconv.Itoa(st.Acc[i]))
		}
		x, _ := new(big.Int).SetString(a, 10)
		y, _ := new(big.Int).SetString(b, 10)
		got, ok := new(big.Int).SetString(digits.String(), 10)
		if want := new(big.Int).Mul(x, y); !ok || got.Cmp(want) != 0 {
			t.Errorf("product %s, want %s", digits.String(), want)
		}
	})

	t.Run("ledger", func(t *testing.T) {
		// The balances from one file and the transfers from a JSON Lines
		// file, one transfer a line.
		rep := f.submit(t, "ledger@1.0.0", "@"+exampleTask(t, "ledger.balances.json"), 3,
			"--params-jsonl", "transfers="+exampleTask(t, "ledger.transfers.jsonl"))
		var params struct {
			Balances  map[string]int64
			Transfers []struct {
				From, To string
				Amount   int64
			}
		}
		data, err := os.ReadFile(exampleTask(t, "ledger.params.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &params); err != nil {
			t.Fatal(err)
		}
		want := params.Balances
		for _, tr := range params.Transfers {
			if tr.From != tr.To && want[tr.From] >= tr.Amount {
				want[tr.From] -= tr.Amount
				want[tr.To] += tr.Amount
			}
		}
		var st struct {
			N        int
			Balances map[string]int64
		}
		finalState(t, rep, &st)
		if st.N != len(params.Transfers) || !maps.Equal(st.Balances, want) {
			t.Errorf("closing balances %v after %d transfers, want %v after %d", st.Balances, st.N, want, len(params.Transfers))
		}
	})

	t.Run("classify", func(t *testing.T) {
		rep := f.submit(t, "classify", "@"+exampleTask(t, "classify.params.json"), 3)
		var params struct{ Records, Truth []string }
		data, err := os.ReadFile(exampleTask(t, "classify.params.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &params); err != nil {
			t.Fatal(err)
		}
		var st struct{ Labels []string }
		finalState(t, rep, &st)
		if !slices.Equal(st.Labels, params.Truth) || rep.Steps != int64(len(params.Records)) {
			t.Errorf("labels %v over %d steps, want %v", st.Labels, rep.Steps, params.Truth)
		}
	})
}
