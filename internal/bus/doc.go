// Package bus is the fleet's NATS JetStream transport: connecting
// (identities, permissions, redacted URLs), the names of one fleet's
// streams, buckets, subjects and consumers (Namespace), and the loops
// every role would otherwise write for itself:
//
//   - Worker, the one consume loop of a durable pull consumer (slots
//     reserved before fetching, keep-alive, two-stage stop, a handler's
//     error deciding its message's fate), run by the voter, the judge and
//     the coordinator's job intake;
//   - KV, a typed view of a bucket with the one compare-and-set loop
//     (Update) and conflict test, used by the job registry, the leases and
//     the judge's sessions and approvals; Mirror, a bucket kept in memory
//     through a watch; watches that survive a node loss (Resilient);
//   - ReadOrdered, the one reader of a stream range in order, used by the
//     journal, the dead-letter listing and the judge's audit trail;
//   - dead letters (publish, list, replay), control and decide requests,
//     inbox replies, and the retry of requests a server did not answer
//     (Transient, RetryTransient).
//
// What exists on the server (streams, consumers, buckets, their limits,
// who creates them) is declared in package internal/topology.
package bus
