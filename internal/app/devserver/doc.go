// Package devserver starts the servers a single-process run and the tests
// need when none is given: an in-process nats-server with JetStream
// (RunNATS), a redis-server process on a free port (StartRedis) and the
// embedded Redis-compatible miniredis (RunMiniredis). Production roles
// never import it: they connect to servers someone else runs.
package devserver
