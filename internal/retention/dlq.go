package retention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// deadLetters removes the dead letters stored longer ago than their
// tenant's (or job's) age. A subject's letters are stored in time order,
// so per subject a binary search on the stream sequence (by the stored
// time) finds the first letter to keep, and one purge removes the
// subject's letters below it: O(subjects × log letters) requests, not
// one per letter.
func (w *sweep) deadLetters(ctx context.Context) error {
	ns := w.s.topo.NS
	st, err := w.s.topo.JS.Stream(ctx, ns.DLQStream())
	if err != nil {
		return fmt.Errorf("retention: dlq stream: %w", err)
	}
	filter := ns.DLQWildcard()
	prefix := strings.TrimSuffix(filter, ">")
	if w.opts.Tenant != "" {
		filter = prefix + w.opts.Tenant + ".>"
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("retention: list dead letters: %w", err)
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		subjects = append(subjects, subj)
	}
	slices.Sort(subjects)
	var errs []error
	for _, subj := range subjects {
		if err := w.hold(ctx); err != nil {
			return errors.Join(append(errs, err)...)
		}
		tenant, job, _ := strings.Cut(strings.TrimPrefix(subj, prefix), ".")
		age := w.pol.For(tenant, job).DLQ
		if w.opts.Before.IsZero() && age == 0 {
			continue // kept forever
		}
		n, err := w.trimLetters(ctx, st, subj, age, int64(info.State.Subjects[subj]))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			w.res.DeadLetters += n
			w.res.Items = append(w.res.Items, Item{Kind: "dlq", Tenant: tenant, ID: job, What: []string{"dead_letters"}, Msgs: n})
		}
	}
	return errors.Join(errs...)
}

// trimLetters removes (dry: counts) subj's letters past age, of total
// stored, and returns how many there were.
func (w *sweep) trimLetters(ctx context.Context, st jetstream.Stream, subj string, age time.Duration, total int64) (int64, error) {
	below, all, err := w.firstKept(ctx, st, subj, age)
	if err != nil || below == 0 {
		return 0, err
	}
	if all {
		if !w.opts.DryRun {
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(below)); err != nil {
				return 0, fmt.Errorf("retention: purge %s: %w", subj, err)
			}
		}
		return total, nil
	}
	if w.opts.DryRun {
		return w.countBelow(ctx, st, subj, below)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(below)); err != nil {
		return 0, fmt.Errorf("retention: purge %s: %w", subj, err)
	}
	after, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, fmt.Errorf("retention: count %s: %w", subj, err)
	}
	return max(total-int64(after.State.Subjects[subj]), 0), nil
}

// firstKept finds the sequence to purge subj below: that of its first
// letter to keep, or one past its last letter (all true) when every
// letter is past age; 0 when none is. Letters are in time order: it
// reads the first and the last, then halves the range of sequences
// between a letter past age (lo) and one to keep (hi) until they meet.
func (w *sweep) firstKept(ctx context.Context, st jetstream.Stream, subj string, age time.Duration) (below uint64, all bool, err error) {
	first, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("retention: read %s: %w", subj, err)
	}
	if !w.due(first.Time, age) {
		return 0, false, nil
	}
	last, err := st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return 0, false, fmt.Errorf("retention: read %s: %w", subj, err)
	}
	if w.due(last.Time, age) {
		return last.Sequence + 1, true, nil
	}
	// The next letter at or after lo is past age; at or after hi, keep's
	// is the first to keep.
	lo, hi, keep := first.Sequence, last.Sequence, last.Sequence
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		m, err := st.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(subj))
		if err != nil {
			return 0, false, fmt.Errorf("retention: read %s at %d: %w", subj, mid, err)
		}
		if w.due(m.Time, age) && m.Sequence < hi {
			lo = m.Sequence
		} else {
			hi, keep = mid, m.Sequence
		}
	}
	return keep, false, nil
}

// countBelow counts subj's letters below sequence below, one read each:
// only a dry run does, as it removes nothing to count by.
func (w *sweep) countBelow(ctx context.Context, st jetstream.Stream, subj string, below uint64) (int64, error) {
	var n int64
	for seq := uint64(1); seq < below; n++ {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("retention: read %s after %d: %w", subj, seq, err)
		}
		if m.Sequence >= below {
			break
		}
		seq = m.Sequence + 1
	}
	return n, nil
}
