package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// OrphanResults is what PurgeOrphanResults removed: results per subject.
type OrphanResults map[string]uint64

// Total is the number of results removed.
func (o OrphanResults) Total() uint64 {
	var n uint64
	for _, c := range o {
		n += c
	}
	return n
}

// orphanLookupTimeout bounds one consumer-info call of the sweep, so a
// consumer whose info does not arrive (a cluster node down) costs one
// subject's turn, not the whole pass.
const orphanLookupTimeout = 5 * time.Second

// PurgeOrphanResults removes the sample results no consumer will ever
// read, and returns how many it removed from each subject. log (nil:
// slog.Default()) hears of the results it kept because it could not tell.
//
// A job's results are read by the durable of its owner's lease
// generation (ResultConsumer), whose filter is that generation's subject.
// A voter that answers after the generation's consumer is gone (the job
// was taken over, or ended and cleaned up) publishes into a work queue
// nobody reads: without this its results stay until the stream's max
// age. While the generation's consumer exists its owner reads them, and
// counts those of a closed step as late (the report's late_samples); this
// removes the rest.
//
// A subject's results are removed only when the server answers "consumer
// not found" for its generation's durable. The consumer list is only a
// shortcut for the consumers it shows: on a cluster it leaves out a
// consumer whose info is slow or whose replicas are offline, and nats.go
// drops the list's "missing" names. Any other answer (an error, a
// timeout, a subject that names no generation) keeps the results.
//
// Only results stored before it looked at the consumers are removed: a
// generation's consumer is created before its first request is published,
// so a result stored earlier on a subject whose consumer is not found
// answers a request of a generation that is gone, and can no longer count.
// Coordinators run it now and then; running it twice at once is harmless.
func PurgeOrphanResults(ctx context.Context, js jetstream.JetStream, ns Namespace, log *slog.Logger) (OrphanResults, error) {
	if log == nil {
		log = slog.Default()
	}
	s, err := js.Stream(ctx, ns.ResultsStream())
	if err != nil {
		return nil, fmt.Errorf("bus: results stream: %w", err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(ns.subject("result")+">"))
	if err != nil {
		return nil, fmt.Errorf("bus: results stream: %w", err)
	}
	if len(info.State.Subjects) == 0 {
		return nil, nil
	}
	upTo := info.State.LastSeq // what was stored before the consumers were looked at
	// The consumers listed exist: their subjects stay without asking.
	var filters []string
	list := s.ListConsumers(ctx)
	for ci := range list.Info() {
		filters = append(filters, ci.Config.FilterSubject)
		filters = append(filters, ci.Config.FilterSubjects...)
	}
	if err := list.Err(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bus: results stream consumers: %w", err)
		}
		log.Debug("list the results stream's consumers; asking for each generation's consumer instead", "err", err)
	}
	out := OrphanResults{}
	for _, subject := range slices.Sorted(maps.Keys(info.State.Subjects)) {
		if slices.ContainsFunc(filters, func(f string) bool { return f != "" && Covers(f, subject) }) {
			continue
		}
		tenant, job, gen, ok := ns.parseResultSubject(subject)
		if !ok {
			log.Debug("results kept: their subject names no lease generation", "subject", subject)
			continue
		}
		name := ResultConsumer(tenant, job, gen)
		lctx, cancel := context.WithTimeout(ctx, orphanLookupTimeout)
		_, err := s.Consumer(lctx, name)
		cancel()
		switch {
		case err == nil:
			log.Debug("results kept: their generation's consumer exists though the consumer list left it out", "subject", subject, "consumer", name)
			continue
		case errors.Is(err, jetstream.ErrConsumerNotFound):
		case ctx.Err() != nil:
			return out, fmt.Errorf("bus: look up result consumer %s: %w", name, ctx.Err())
		default:
			log.Info("results kept: their generation's consumer could not be looked up; trying again later", "subject", subject, "consumer", name, "err", err)
			continue
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(upTo+1)); err != nil {
			return out, fmt.Errorf("bus: purge orphan results of %s: %w", subject, err)
		}
		out[subject] = info.State.Subjects[subject]
	}
	return out, nil
}

// parseResultSubject splits a results subject of ns into the tenant, job
// and lease generation ResultSubject made it from.
func (ns Namespace) parseResultSubject(subject string) (tenant, job string, gen int64, ok bool) {
	rest, ok := strings.CutPrefix(subject, ns.subject("result"))
	if !ok {
		return "", "", 0, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return "", "", 0, false
	}
	gen, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || ns.ResultSubject(parts[0], parts[1], gen) != subject {
		return "", "", 0, false
	}
	return parts[0], parts[1], gen, true
}
