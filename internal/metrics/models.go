package metrics

import "sync"

// Model label values are bounded: a voter that allows any model
// (--allow-model '*') takes model names from tenants' jobs
// (escalation.stronger_model), and each would be a series for ever.
const (
	// MaxModels is how many distinct model names a role's metrics keep
	// as label values: the first ones seen.
	MaxModels = 32
	// OtherModel is the label value of every model seen after MaxModels.
	OtherModel = "other"
)

// modelLabels maps model names to bounded label values: the first
// MaxModels distinct names are kept, later ones become OtherModel. Safe
// for concurrent use.
type modelLabels struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// label is model's label value.
func (m *modelLabels) label(model string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.seen[model]; ok {
		return model
	}
	if len(m.seen) >= MaxModels {
		return OtherModel
	}
	if m.seen == nil {
		m.seen = map[string]struct{}{}
	}
	m.seen[model] = struct{}{}
	return model
}
