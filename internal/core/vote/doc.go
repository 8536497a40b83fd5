// Package vote is MAKER's decision rule, first-to-ahead-by-k, as plain Go:
// the open step's samples are counted in index order, red-flagged ones are
// counted but give no vote, and the step is decided the moment one
// candidate leads every other by k valid votes.
//
// It is the core the rest is built around. The step machine is typed on
// its values (Sample, Counters, Decision); Tally applies the rule in
// memory, for the machine's harness and anything else that needs it
// without a server; internal/store applies the very same rule atomically
// in Redis (record_sample.lua and its two siblings), for a fleet of
// coordinators. Cases is the conformance table both must pass: the Go rule
// in this package's tests, the Lua in internal/store's, on a real
// redis-server, so the two cannot drift apart.
package vote
