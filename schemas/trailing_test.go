package schemas_test

import (
	"os"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

func TestTrailingBrace(t *testing.T) {
	b, _ := os.ReadFile("testdata/job_spec.json")
	for _, tail := range []string{"}", "]", " x", "{}"} {
		var s schemas.JobSpec
		if err := schemas.Decode(append(append([]byte{}, b...), tail...), &s); err == nil {
			t.Errorf("accepted trailing %q", tail)
		}
	}
	var s schemas.JobSpec
	if err := schemas.Decode(append(append([]byte{}, b...), " \n"...), &s); err != nil {
		t.Errorf("trailing space: %v", err)
	}
}
