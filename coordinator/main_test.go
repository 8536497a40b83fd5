package coordinator_test

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// checkSolved checks the fault-free oracle: a solved run of disks whose
// decided keys are the strategy's, with consistent counters.
func checkSolved(t *testing.T, rep schemas.JobReport, disks int) {
	t.Helper()
	steps := int64(1)<<disks - 1
	if rep.State != schemas.StateSolved || !rep.Solved {
		t.Fatalf("state %q (solved %v), reason %q; want solved", rep.State, rep.Solved, rep.Reason)
	}
	if rep.Errors != 0 || len(rep.ErrorSteps) != 0 {
		t.Errorf("errors %d at steps %v, want none", rep.Errors, rep.ErrorSteps)
	}
	if rep.Steps != steps || rep.TotalSteps != steps {
		t.Errorf("steps %d of %d, want %d of %d", rep.Steps, rep.TotalSteps, steps, steps)
	}
	checkCounters(t, rep)
	if want := fleettest.GoldenTrace(disks); rep.TraceSHA256 != want {
		t.Errorf("trace_sha256 %s, want the golden trace %s", rep.TraceSHA256, want)
	}
	if rep.NoConsensus != nil {
		t.Errorf("no_consensus %+v on a solved job", rep.NoConsensus)
	}
}

// checkCounters checks the report's bookkeeping identities.
func checkCounters(t *testing.T, rep schemas.JobReport) {
	t.Helper()
	if rep.Samples != rep.Votes+rep.RedFlagged {
		t.Errorf("samples %d != votes %d + red_flagged %d", rep.Samples, rep.Votes, rep.RedFlagged)
	}
	var byReason int64
	for _, n := range rep.RedFlags {
		byReason += n
	}
	if byReason != rep.RedFlagged {
		t.Errorf("red_flags %v sum to %d, red_flagged is %d", rep.RedFlags, byReason, rep.RedFlagged)
	}
	if w := rep.SkippedSamples + rep.CancelledSamples + rep.LateSamples + rep.DuplicateResults + rep.SpeculativeWasted; rep.WastedSamples != w {
		t.Errorf("wasted %d != skipped+cancelled+late+duplicate+lost speculation %d", rep.WastedSamples, w)
	}
	if rep.Steps > 0 {
		if got, want := rep.SamplesPerStep, float64(rep.Samples)/float64(rep.Steps); math.Abs(got-want) > 1e-9 {
			t.Errorf("samples_per_step %v, want %v", got, want)
		}
		k := rep.K
		if rc := rep.Receipt; rc != nil && len(rc.KSteps) > 0 {
			k = rc.KSteps[0].K // adaptive k: the smallest margin used
		}
		if rep.VotesPerStep < float64(k) {
			t.Errorf("votes_per_step %v below k=%d: some step decided below the margin", rep.VotesPerStep, k)
		}
	}
	if err := rep.Validate(); err != nil {
		t.Errorf("report does not validate: %v", err)
	}
}

// checkNoWaste checks a run that drew nothing it did not count.
func checkNoWaste(t *testing.T, rep schemas.JobReport) {
	t.Helper()
	if rep.WastedSamples != 0 || rep.Resampled != 0 || rep.MalformedMessages != 0 {
		t.Errorf("wasted %d (skipped %d cancelled %d late %d duplicate %d), resampled %d, malformed %d; want all 0",
			rep.WastedSamples, rep.SkippedSamples, rep.CancelledSamples, rep.LateSamples, rep.DuplicateResults,
			rep.Resampled, rep.MalformedMessages)
	}
}

// checkBand checks got within [lo, hi]·want.
func checkBand(t *testing.T, what string, got, want, lo, hi float64) {
	t.Helper()
	if want <= 0 {
		t.Errorf("%s: no theory figure (%v) to compare %v with", what, want, got)
		return
	}
	if r := got / want; r < lo || r > hi {
		t.Errorf("%s %.3f is %.2f× theory %.3f, want within [%.2f, %.2f]×", what, got, r, want, lo, hi)
	}
}

// timeless is a report without its timing fields and job id, the parts
// that legitimately differ between two runs of one spec.
func timeless(rep schemas.JobReport) schemas.JobReport {
	rep.JobID = ""
	rep.WallSeconds, rep.StepsPerSecond = 0, 0
	rep.StartedAt, rep.FinishedAt = time.Time{}, time.Time{}
	return rep
}

// diffReports lists the JSON fields in which a and b differ.
func diffReports(a, b schemas.JobReport) string {
	var ma, mb map[string]any
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	var out []string
	for k, va := range ma {
		if vb := mb[k]; !reflect.DeepEqual(va, vb) {
			out = append(out, k+": "+compact(va)+" vs "+compact(vb))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// lineBuffer is an io.Writer that keeps whole lines; safe for concurrent
// writers.
type lineBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lineBuffer) Lines() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out [][]byte
	for _, l := range bytes.Split(b.buf.Bytes(), []byte{'\n'}) {
		if len(l) > 0 {
			out = append(out, append([]byte(nil), l...))
		}
	}
	return out
}
