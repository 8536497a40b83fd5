// Package e2e holds end-to-end tests that drive the real `maker` binary as
// separate processes: a simulated model, a coordinator and voters on a real
// nats-server and redis-server, jobs submitted and planned from the command
// line, and the command line's contract (exit codes, messages, nothing
// enqueued on bad input). It has no code of its own; see the _test.go files.
//
// TestMain builds cmd/maker once into a temporary directory. Every process a
// test starts runs in its own process group, writes stdout and stderr to
// files in the test's temporary directory (logged when the test fails) and
// is killed, with its whole group, when the test ends.
package e2e
