package coordinator_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
)

// memTally is the Tally port on the Go vote rule (internal/core/vote) in
// memory: one vote.Tally per job, for every coordinator of the process.
type memTally struct {
	mu       sync.Mutex
	jobs     map[store.JobRef]*vote.Tally
	recorded atomic.Int64 // samples recorded, to show the port was used
}

var _ coordinator.Tally = (*memTally)(nil)

func (m *memTally) job(ref store.JobRef) *vote.Tally {
	if m.jobs == nil {
		m.jobs = map[store.JobRef]*vote.Tally{}
	}
	t := m.jobs[ref]
	if t == nil {
		t = &vote.Tally{}
		m.jobs[ref] = t
	}
	return t
}

func (m *memTally) OpenStep(_ context.Context, ref store.JobRef, step, epoch int64) (vote.Counters, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.job(ref).Open(step, epoch)
}

func (m *memTally) RecordMany(_ context.Context, ref store.JobRef, samples []vote.Sample, k int) ([]vote.RecordResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.job(ref)
	out := make([]vote.RecordResult, len(samples))
	for i, s := range samples {
		res, err := t.Record(s, k)
		if err != nil {
			return nil, err
		}
		out[i] = res
	}
	m.recorded.Add(int64(len(samples)))
	return out, nil
}

func (m *memTally) CloseStep(_ context.Context, ref store.JobRef, step, epoch int64) ([]schemas.TallyEntry, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.job(ref).Close(step, epoch)
}

func (m *memTally) DeleteJob(_ context.Context, ref store.JobRef) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.jobs, ref)
	return nil
}

// TestGoldenOnTheGoRule: the golden jobs, their votes counted by the Go
// rule in memory through the Tally port instead of Redis's Lua, decide
// and count exactly what testdata/golden.json holds. It shows the shell
// reaches the tally only through its port, and that the two homes of the
// rule agree on whole jobs (red flags, no consensus, both rungs of the
// ladder), not only on the conformance table's sequences.
func TestGoldenOnTheGoRule(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]goldenFigures{}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	for _, gc := range goldenCases {
		t.Run(gc.Name, func(t *testing.T) {
			t.Parallel()
			tally := &memTally{}
			got := runGolden(t, gc, coordinator.Config{Storage: coordinator.Storage{Tally: tally}})
			if tally.recorded.Load() == 0 {
				t.Fatal("no sample was recorded through the port")
			}
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(want[gc.Name])
			if string(a) != string(b) {
				t.Errorf("figures on the Go rule differ from Redis's:\n got %s\nwant %s", a, b)
			}
		})
	}
}
