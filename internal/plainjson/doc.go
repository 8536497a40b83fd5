// Package plainjson reads and writes JSON as plain Go values —
// map[string]any, []any, string, bool, nil, int64 for integers that fit
// and float64 for other numbers — without reflection.
//
// It is the hot path of task specs (states, answers and vote keys are read
// and written for every sample) and of the simulated model's responses.
// What it writes is byte for byte what encoding/json writes with HTML
// escaping off, sorted keys included, so keys and hashes made from it do
// not depend on which writer made them; what it reads, encoding/json reads
// the same way (the fuzz tests hold both to that).
package plainjson

// MaxDepth bounds nesting, so a hostile document cannot make the reader
// or the writer recurse without end.
const MaxDepth = 64
