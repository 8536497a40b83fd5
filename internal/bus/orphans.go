package bus

import (
	"context"
	"fmt"
	"slices"

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

// PurgeOrphanResults removes the sample results no consumer will ever
// read, and returns how many it removed from each subject.
//
// A job's results are read by the durable of its owner's lease
// generation, whose filter is that generation's subject. A voter that
// answers after the generation's consumer is gone (the job was taken
// over, or ended and cleaned up) publishes into a work queue nobody
// reads: without this its results stay until the stream's max age. While
// the generation's consumer exists its owner reads them, and counts those
// of a closed step as late (the report's late_samples); this removes the
// rest.
//
// Only results stored before it looked at the consumers are removed: a
// generation's consumer is created before its first request is published,
// so a result stored earlier on a subject no consumer covers answers a
// request of a generation that is gone, and can no longer count.
// Coordinators run it now and then; running it twice at once is harmless.
func PurgeOrphanResults(ctx context.Context, js jetstream.JetStream, ns Namespace) (OrphanResults, error) {
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
	upTo := info.State.LastSeq // what was stored before the consumers were listed
	var filters []string
	list := s.ListConsumers(ctx)
	for ci := range list.Info() {
		filters = append(filters, ci.Config.FilterSubject)
		filters = append(filters, ci.Config.FilterSubjects...)
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("bus: results stream consumers: %w", err)
	}
	out := OrphanResults{}
	for subject, n := range info.State.Subjects {
		if slices.ContainsFunc(filters, func(f string) bool { return f != "" && covers(f, subject) }) {
			continue
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(upTo+1)); err != nil {
			return out, fmt.Errorf("bus: purge orphan results of %s: %w", subject, err)
		}
		out[subject] = n
	}
	return out, nil
}
