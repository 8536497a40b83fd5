package task_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// stub is a task that binds to nothing; only its name matters here.
type stub string

func (s stub) Name() string { return string(s) }
func (s stub) Bind(json.RawMessage) (task.Instance, error) {
	return nil, errors.New("stub " + string(s))
}

func TestRegistryLookup(t *testing.T) {
	t.Parallel()
	r := task.NewRegistry(hanoi.Task{}, stub("zeta"), stub("alpha"))
	tests := []struct {
		name    string
		lookup  string
		wantErr bool
	}{
		{"hanoi", "hanoi", false},
		{"stub", "zeta", false},
		{"unknown", "chess", true},
		{"empty", "", true},
		{"case matters", "Hanoi", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := r.Lookup(tt.lookup)
			if !tt.wantErr {
				if err != nil || got.Name() != tt.lookup {
					t.Fatalf("Lookup(%q) = %v, %v", tt.lookup, got, err)
				}
				return
			}
			if !errors.Is(err, task.ErrUnknownTask) {
				t.Fatalf("Lookup(%q) error %v, want ErrUnknownTask", tt.lookup, err)
			}
			// The error must tell the user what they could have asked for.
			for _, name := range []string{"alpha", "hanoi", "zeta"} {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("Lookup(%q) error %q does not list %q", tt.lookup, err, name)
				}
			}
			if !strings.Contains(err.Error(), `"`+tt.lookup+`"`) {
				t.Errorf("Lookup(%q) error %q does not quote the name asked for", tt.lookup, err)
			}
		})
	}
}

func TestRegistryNamesSorted(t *testing.T) {
	t.Parallel()
	r := task.NewRegistry(stub("zeta"), hanoi.Task{}, stub("alpha"), stub("hanoi"))
	got := strings.Join(r.Names(), ",")
	if got != "alpha,hanoi,zeta" {
		t.Errorf("Names() = %s, want alpha,hanoi,zeta", got)
	}
	// A later task with the same name replaces the earlier one.
	h, err := r.Lookup("hanoi")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.(stub); !ok {
		t.Errorf("Lookup(hanoi) = %T, want the later stub", h)
	}
}

func TestRegistryZeroValue(t *testing.T) {
	t.Parallel()
	var r task.Registry
	if names := r.Names(); len(names) != 0 {
		t.Errorf("Names() = %v, want none", names)
	}
	if _, err := r.Lookup("hanoi"); !errors.Is(err, task.ErrUnknownTask) {
		t.Errorf("Lookup on zero registry: %v, want ErrUnknownTask", err)
	}
}

func TestRegistryBind(t *testing.T) {
	t.Parallel()
	r := task.NewRegistry(hanoi.Task{})
	in, err := r.Bind("hanoi", json.RawMessage(`{"disks": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	if in.TotalSteps() != 7 || string(in.Params()) != `{"disks":3}` {
		t.Errorf("bound instance: %d steps, params %s", in.TotalSteps(), in.Params())
	}
	if _, err := r.Bind("hanoi", json.RawMessage(`{"disks": 0}`)); !errors.Is(err, task.ErrInvalidParams) {
		t.Errorf("Bind bad params: %v, want ErrInvalidParams", err)
	}
	if _, err := r.Bind("nope", json.RawMessage(`{}`)); !errors.Is(err, task.ErrUnknownTask) {
		t.Errorf("Bind unknown task: %v, want ErrUnknownTask", err)
	}
}
