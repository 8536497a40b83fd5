package client

import (
	"context"
	"io"

	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/schemas"
)

// BatchOptions configure a batch. Zero fields take the defaults.
type BatchOptions struct {
	// Priority of the batch's jobs whose line sets none, 0 to 9 (higher
	// first). Default 0.
	Priority int
	// Window is the most jobs of the batch unfinished at once. Default 32.
	Window int
	// MaxLines refuses a longer batch. Default 50,000.
	MaxLines int
	// MaxLineBytes is the longest line taken; a longer one is an invalid
	// line (the rest runs). Default 256 KiB.
	MaxLineBytes int
	// Webhook is a URL the batch's end is POSTed to (optional;
	// schemas.ValidWebhookURL).
	Webhook string
}

// SubmitBatch reads a batch from r, one job per JSONL line
// ({"custom_id": ..., "task": ..., "params": {...}, "k": ...}), and
// stores it in the client's tenant; the fleet's coordinators then run its
// jobs in input order. Every line is checked as Submit would check it: an
// invalid line is kept with its error (BatchErrors) and the rest runs. A
// batch that cannot run as a whole (a custom_id twice, no lines, too many)
// is ErrInvalid, naming the lines, and nothing of it is kept. Memory does
// not grow with the batch.
func (c *Client) SubmitBatch(ctx context.Context, r io.Reader, o BatchOptions) (schemas.BatchRecord, error) {
	store, err := c.batches(ctx, true)
	if err != nil {
		return schemas.BatchRecord{}, err
	}
	rec, err := store.Create(ctx, c.tenant, r, batch.CreateOptions{
		Priority: o.Priority, Window: o.Window, MaxLines: o.MaxLines, MaxLineBytes: o.MaxLineBytes, Webhook: o.Webhook,
	})
	return rec, wrap(err)
}

// Batch returns the batch's record: its state and counts. id is "id" (in
// the client's tenant) or "tenant/id".
func (c *Client) Batch(ctx context.Context, id string) (schemas.BatchRecord, error) {
	tenant, b, store, err := c.batchRef(ctx, id)
	if err != nil {
		return schemas.BatchRecord{}, err
	}
	rec, err := store.Get(ctx, tenant, b)
	return rec, wrap(err)
}

// ListBatches returns a tenant's batches ("" for the client's), newest
// first.
func (c *Client) ListBatches(ctx context.Context, tenant string) ([]schemas.BatchRecord, error) {
	if tenant == "" {
		tenant = c.tenant
	}
	store, err := c.batches(ctx, false)
	if err != nil {
		return nil, err
	}
	recs, err := store.List(ctx, tenant)
	return recs, wrap(err)
}

// WaitBatch blocks until the batch has ended (completed or cancelled) and
// returns its record. onUpdate, if not nil, receives the record as it
// stands and on each change, from the calling goroutine.
func (c *Client) WaitBatch(ctx context.Context, id string, onUpdate func(schemas.BatchRecord)) (schemas.BatchRecord, error) {
	tenant, b, store, err := c.batchRef(ctx, id)
	if err != nil {
		return schemas.BatchRecord{}, err
	}
	rec, err := store.Wait(ctx, tenant, b, onUpdate)
	return rec, wrap(err)
}

// BatchOutput writes the batch's results to w as JSONL, one
// schemas.BatchOutputLine per input line in input order: its custom_id
// and job's report, or its error. Lines not finished yet say so
// (not_finished). It streams: memory does not grow with the batch.
func (c *Client) BatchOutput(ctx context.Context, id string, w io.Writer) error {
	tenant, b, store, err := c.batchRef(ctx, id)
	if err != nil {
		return err
	}
	return wrap(store.Output(ctx, tenant, b, w))
}

// BatchErrors writes the batch's failed lines to w as JSONL, in input
// order: invalid lines with their line number, and jobs that did not
// succeed.
func (c *Client) BatchErrors(ctx context.Context, id string, w io.Writer) error {
	tenant, b, store, err := c.batchRef(ctx, id)
	if err != nil {
		return err
	}
	return wrap(store.Errors(ctx, tenant, b, w))
}

// CancelBatch stops the batch: no more of its jobs start, and its
// unfinished jobs are cancelled. Cancelling a cancelled batch changes
// nothing; a completed one is ErrFinished.
func (c *Client) CancelBatch(ctx context.Context, id string) (schemas.BatchRecord, error) {
	tenant, b, store, err := c.batchRef(ctx, id)
	if err != nil {
		return schemas.BatchRecord{}, err
	}
	rec, err := store.Cancel(ctx, tenant, b)
	return rec, wrap(err)
}

// batches is the batch store on the fleet; withTasks adds the task
// registry, which creating a batch needs.
func (c *Client) batches(ctx context.Context, withTasks bool) (*batch.Store, error) {
	topo, err := c.topology(ctx)
	if err != nil {
		return nil, err
	}
	var tasks Tasks
	if withTasks {
		if tasks, err = c.Tasks(ctx); err != nil {
			return nil, err
		}
	}
	return batch.NewStore(topo, tasks), nil
}

func (c *Client) batchRef(ctx context.Context, id string) (tenant, b string, store *batch.Store, err error) {
	if tenant, b, err = c.ref(id, schemas.ValidBatchID); err != nil {
		return "", "", nil, err
	}
	store, err = c.batches(ctx, false)
	return tenant, b, store, err
}
