package batch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// outputChunk is how many lines Output reads, and looks the reports of
// up, at once: what bounds its memory.
const outputChunk = 32

// Output writes tenant's batch id as JSONL to w, one schemas.BatchOutputLine
// per input line, in input order: the line's job report (response), or
// why it has none (error: the line's own error, not_finished, or
// batch_cancelled for a line never fed); a job that failed or was
// cancelled has both. It may be read at any time; lines whose jobs have
// not ended yet say not_finished. Memory does not grow with the batch:
// lines are read and written a chunk at a time.
func (s *Store) Output(ctx context.Context, tenant, id string, w io.Writer) error {
	return s.write(ctx, tenant, id, w, false)
}

// Errors writes the output lines of tenant's batch id that carry an error
// (the invalid lines, failed and cancelled jobs) to w as JSONL, in input
// order; lines that have not ended yet are left out.
func (s *Store) Errors(ctx context.Context, tenant, id string, w io.Writer) error {
	return s.write(ctx, tenant, id, w, true)
}

func (s *Store) write(ctx context.Context, tenant, id string, w io.Writer, errorsOnly bool) error {
	rec, err := s.Get(ctx, tenant, id)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(bw)
	chunk := make([]storedItem, 0, outputChunk)
	emit := func() error {
		lines := s.outputLines(ctx, rec, chunk)
		for i := range lines {
			if errorsOnly && (lines[i].Error == nil || lines[i].Error.Code == schemas.BatchErrNotFinished) {
				continue
			}
			if err := enc.Encode(&lines[i]); err != nil {
				return err
			}
		}
		chunk = chunk[:0]
		return bw.Flush()
	}
	var last int64
	err = bus.ReadOrdered(ctx, s.topo.JS, bus.ReadRange{
		Stream: s.topo.NS.BatchesStream(), Subjects: []string{s.topo.NS.BatchSubject(tenant, id)},
	}, func(seq uint64, data []byte) error {
		var it schemas.BatchItem
		if err := schemas.Decode(data, &it); err != nil {
			return fmt.Errorf("%w: batch %s/%s: the stored line after line %d is unreadable: %w", ErrUnavailable, tenant, id, last, err)
		}
		if it.Tenant != tenant || it.BatchID != id || it.Line <= last {
			return fmt.Errorf("%w: batch %s/%s: stored line %d is out of order (after line %d)", ErrUnavailable, tenant, id, it.Line, last)
		}
		last = it.Line
		chunk = append(chunk, storedItem{seq: seq, BatchItem: it})
		if len(chunk) == outputChunk {
			return emit()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return emit()
}

// storedItem is a stored line and its stream sequence.
type storedItem struct {
	seq uint64
	schemas.BatchItem
}

// outputLines looks the reports of a chunk of lines up, at once, and
// returns their output lines in order.
func (s *Store) outputLines(ctx context.Context, rec schemas.BatchRecord, items []storedItem) []schemas.BatchOutputLine {
	out := make([]schemas.BatchOutputLine, len(items))
	var wg sync.WaitGroup
	for i := range items {
		it := &items[i]
		o := &out[i]
		o.ID, o.CustomID, o.Line = schemas.BatchJobID(it.BatchID, it.Line), it.CustomID, it.Line
		if it.Error != nil {
			o.Error = it.Error
			continue
		}
		o.JobID = it.Spec.JobID
		wg.Go(func() { s.lineResult(ctx, rec, it, o) })
	}
	wg.Wait()
	return out
}

// lineResult fills o with the report of it's job, or why it has none.
func (s *Store) lineResult(ctx context.Context, rec schemas.BatchRecord, it *storedItem, o *schemas.BatchOutputLine) {
	e, err := s.topo.Reports.Get(ctx, bus.JobKey(it.Tenant, it.Spec.JobID))
	var rep schemas.JobReport
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		fed := rec.NextSeq > 0 && it.seq < uint64(rec.NextSeq)
		if !fed && (rec.State == schemas.BatchCancelled || rec.State == schemas.BatchCancelling) {
			o.Error = &schemas.BatchError{Code: schemas.BatchErrBatchCancelled, Message: "the batch was cancelled before this line's job was fed"}
			return
		}
		o.Error = &schemas.BatchError{Code: schemas.BatchErrNotFinished, Message: "the job has not finished"}
		if !fed {
			o.Error.Message = "the job has not been fed into the fleet yet"
		}
		return
	case err != nil:
		o.Error = &schemas.BatchError{Code: schemas.BatchErrNotFinished, Message: message("its report could not be read: " + err.Error())}
		return
	case schemas.Decode(e.Value(), &rep) != nil:
		o.Error = &schemas.BatchError{Code: schemas.BatchErrJobFailed, Message: "its report is unreadable"}
		return
	}
	o.Response = &rep
	switch outcomeOf(rep.State) {
	case outcomeFailed:
		o.Error = &schemas.BatchError{Code: schemas.BatchErrJobFailed, Message: message(orText(rep.Reason, "the job failed"))}
	case outcomeCancelled:
		o.Error = &schemas.BatchError{Code: schemas.BatchErrJobCancelled, Message: message(orText(rep.Reason, "the job was cancelled"))}
	}
}

func orText(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}
