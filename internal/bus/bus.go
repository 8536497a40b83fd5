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

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Transient reports whether err means the server did not answer in time
// or not at all (yet), so the same request may succeed later.
func Transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return true
	}
	// A server still bringing JetStream up may fail to create a stream's
	// or a consumer's store, or say it is not available yet.
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jsErrNotAvailable ||
		(apiErr.ErrorCode == jsErrStreamCreate || apiErr.ErrorCode == jsErrConsumerCreate) &&
			strings.HasPrefix(apiErr.Description, "error creating store")
}

// JetStream error codes nats.go has no name for.
const (
	jsErrStreamCreate   jetstream.ErrorCode = 10049 // stream create failed: "{err}"
	jsErrConsumerCreate jetstream.ErrorCode = 10012 // consumer create failed: "{err}"
	jsErrNotAvailable   jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
)

// Covers reports whether subject filter f matches every subject filter
// want matches.
func Covers(f, want string) bool {
	ft, wt := strings.Split(f, "."), strings.Split(want, ".")
	for i, t := range ft {
		if t == ">" {
			return len(wt) > i
		}
		if i >= len(wt) {
			return false
		}
		switch {
		case t == "*":
			if wt[i] == ">" {
				return false
			}
		case t != wt[i]:
			return false
		}
	}
	return len(ft) == len(wt)
}
