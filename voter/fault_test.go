package voter

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sashabaranov/go-openai"
)

// TestFaultBackoff: each refusal in a row doubles the hold from the base
// up to the cap; a call that succeeds ends the model's fault; the set of
// models kept is bounded.
func TestFaultBackoff(t *testing.T) {
	t.Parallel()
	var f faults
	now := time.Unix(1_700_000_000, 0)
	err := errors.New("status 404: model_not_found")
	var got []time.Duration
	for range 12 {
		got = append(got, f.refused("gpt-nope", err, now, time.Second))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, maxFaultBackoff}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("hold after %d refusals = %s, want %s (all: %v)", i+1, got[i], w, got)
		}
	}
	if last := got[len(got)-1]; last != maxFaultBackoff {
		t.Errorf("hold after 12 refusals = %s, want the cap %s", last, maxFaultBackoff)
	}
	f.served("gpt-nope")
	if d := f.refused("gpt-nope", err, now, time.Second); d != time.Second {
		t.Errorf("hold after a success and a new refusal = %s, want the base again", d)
	}
	for i := range 2 * maxFaultModels {
		f.refused(fmt.Sprintf("m%d", i), err, now, time.Second)
	}
	if n := len(f.set); n != maxFaultModels {
		t.Errorf("%d models kept, want at most %d", n, maxFaultModels)
	}
}

// TestReadyNamesTheModel: Ready is nil until the provider refuses a model,
// then names it, the count and the provider's answer, and is nil again
// once the model answers.
func TestReadyNamesTheModel(t *testing.T) {
	t.Parallel()
	v := &Voter{cfg: Config{Model: "sim-1"}}
	if err := v.Ready(); err != nil {
		t.Fatalf("Ready = %v before any refusal", err)
	}
	v.faults.refused("gpt-nope", errors.New("status 404: model_not_found"), time.Now(), time.Millisecond)
	v.faults.refused("gpt-nope", errors.New("status 404: model_not_found"), time.Now(), time.Millisecond)
	err := v.Ready()
	if err == nil || !strings.Contains(err.Error(), `model "gpt-nope"`) || !strings.Contains(err.Error(), "model_not_found") ||
		!strings.Contains(err.Error(), "refused 2 calls") {
		t.Fatalf("Ready = %v, want the model, the count and the provider's answer", err)
	}
	v.faults.served("gpt-nope")
	if err := v.Ready(); err != nil {
		t.Errorf("Ready = %v after the model answered", err)
	}
}

// TestRefusalScope: a refusal of the voter's own model, or of its key,
// stops the voter fetching; a refusal of another model a request names
// does not, and counts for Ready only when the voter's policy names that
// model (not when only AnyModel lets it through: a job's choice must not
// make voters report not ready or stop them).
func TestRefusalScope(t *testing.T) {
	t.Parallel()
	v := &Voter{cfg: Config{Model: "own", Policy: Policy{AllowModels: []string{"strong", AnyModel}}}}
	status := func(code int) error {
		return fmt.Errorf("refused: %w", &openai.APIError{HTTPStatusCode: code, Message: "no"})
	}
	for _, tc := range []struct {
		model           string
		code            int
		record, holdOff bool
	}{
		{"own", 404, true, true},
		{"own", 401, true, true},
		{"own", 403, true, true},
		{"strong", 404, true, false},
		{"strong", 403, true, false},
		{"strong", 401, true, true},
		{"any-name-a-job-chose", 404, false, false},
		{"any-name-a-job-chose", 403, false, false},
		{"any-name-a-job-chose", 401, false, true},
	} {
		record, holdOff := v.refusalScope(tc.model, status(tc.code))
		if record != tc.record || holdOff != tc.holdOff {
			t.Errorf("%s %d: record %v, hold off %v; want %v, %v", tc.model, tc.code, record, holdOff, tc.record, tc.holdOff)
		}
	}
}
