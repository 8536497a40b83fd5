package docmap

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestExtract(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", `package p

// Msg is a message.
// It has fields.
type Msg struct {
	// Tenant and JobID name the job.
	Tenant string
	JobID  string
	Other  string

	// Steps decided, out of TotalSteps.
	Steps int

	TotalSteps int
	Seed int // Seed seeds.
	hidden int
	A, B int // A and B are a pair.
}

type (
	// Grouped is in a group.
	Grouped struct{ X int }
	Undocumented struct{ Y int }
	unexported struct{ Z int }
)

// Alias is not a struct.
type Alias int
`)
	write("a_test.go", `package p

// Test is only in tests.
type Test struct{ T int }
`)
	got, err := Extract(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Msg":        "Msg is a message. It has fields.",
		"Msg.Tenant": "Tenant and JobID name the job.",
		"Msg.JobID":  "Tenant and JobID name the job.",
		"Msg.Steps":  "Steps decided, out of TotalSteps.",
		"Msg.Seed":   "Seed seeds.",
		"Msg.A":      "A and B are a pair.",
		"Msg.B":      "A and B are a pair.",
		"Grouped":    "Grouped is in a group.",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Extract:\n got %v\nwant %v", got, want)
	}
}
