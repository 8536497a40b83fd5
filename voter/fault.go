package voter

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxFaultBackoff caps how long a worker holds its slot after the
// provider refused this voter's key or model: long enough that a
// misconfigured voter takes few requests, short enough that a fixed key or
// a model deployed again is found within a minute.
const maxFaultBackoff = 30 * time.Second

// maxFaultModels bounds the models whose faults are kept (requests name
// their model; a flood of names must not grow the set): a refusal of a
// model beyond them backs off from the base delay and is not reported.
const maxFaultModels = 32

// faults are the provider's refusals of this voter's key or of a model
// (llm.ErrProvider), by model, while they last. They are the fleet's
// faults, never a sample's: the voter hands such samples back for a voter
// that can serve them, reports not ready (Ready), and, for its own model
// or its key, fetches nothing for a growing backoff (Voter.refusalScope),
// so it does not run through the queue. A call to the model that succeeds
// ends its fault.
type faults struct {
	mu  sync.Mutex
	set map[string]*fault
}

type fault struct {
	err   error
	since time.Time
	n     int // refusals in a row
}

// refused records err for model at now and returns how long the worker
// holds its slot: base, doubling with each refusal in a row, up to
// maxFaultBackoff.
func (f *faults) refused(model string, err error, now time.Time, base time.Duration) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.set == nil {
		f.set = map[string]*fault{}
	}
	c := f.set[model]
	if c == nil {
		if len(f.set) >= maxFaultModels {
			return max(base, time.Millisecond)
		}
		c = &fault{since: now}
		f.set[model] = c
	}
	c.err = err
	c.n++
	d := base
	for i := 1; i < c.n && d < maxFaultBackoff; i++ {
		d *= 2
	}
	return min(max(d, time.Millisecond), maxFaultBackoff)
}

// served ends model's fault: the model answered.
func (f *faults) served(model string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.set, model)
}

// Ready reports whether the voter can serve the models it was asked for:
// nil, or an error naming each model the provider refuses and its last
// answer (/readyz says it; the voter hands those samples back meanwhile).
// A model's fault ends at the first call to it that succeeds.
func (v *Voter) Ready() error {
	v.faults.mu.Lock()
	defer v.faults.mu.Unlock()
	if len(v.faults.set) == 0 {
		return nil
	}
	models := make([]string, 0, len(v.faults.set))
	for m := range v.faults.set {
		models = append(models, m)
	}
	slices.Sort(models)
	parts := make([]string, len(models))
	for i, m := range models {
		c := v.faults.set[m]
		parts[i] = fmt.Sprintf("model %q: the provider refused %d calls in a row since %s: %v",
			truncate(m, 64), c.n, c.since.UTC().Format(time.RFC3339), c.err)
	}
	return fmt.Errorf("samples are handed back: %s", strings.Join(parts, "; "))
}
