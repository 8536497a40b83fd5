package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/schemas"
)

// Batches is the batch store the batch routes are thin handlers over:
// *batch.Store. Another tenant's batch is batch.ErrNotFound.
type Batches interface {
	// Create reads a JSONL batch from r for tenant and stores it, queued.
	Create(ctx context.Context, tenant string, r io.Reader, o batch.CreateOptions) (schemas.BatchRecord, error)
	Get(ctx context.Context, tenant, id string) (schemas.BatchRecord, error)
	List(ctx context.Context, tenant string) ([]schemas.BatchRecord, error)
	Cancel(ctx context.Context, tenant, id string) (schemas.BatchRecord, error)
	// Output and Errors stream the batch's output and error files.
	Output(ctx context.Context, tenant, id string, w io.Writer) error
	Errors(ctx context.Context, tenant, id string, w io.Writer) error
}

var _ Batches = (*batch.Store)(nil)

func (s *Server) batches() (Batches, error) {
	if s.deps.Batches == nil {
		return nil, problem(TypeNotImplemented, "batches are not available on this server yet")
	}
	return s.deps.Batches, nil
}

// batchErr is the problem of a batch store error.
func batchErr(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return tooLarge(mbe.Limit)
	case errors.Is(err, batch.ErrNotFound):
		return problem(TypeNotFound, "no such batch")
	case errors.Is(err, batch.ErrFinished):
		return problem(TypeConflict, "%s", err)
	case errors.Is(err, batch.ErrTooMany):
		// Valid, refused for the tenant's state: it succeeds once one of
		// its open batches ends or is cancelled.
		pe := problem(TypeRateLimited, "%s", err)
		pe.retryAfter = 30
		return pe
	case errors.Is(err, batch.ErrFull):
		pe := problem(TypeUnavailable, "the fleet's batch store is full: nothing of this batch was kept; try again once batches have ended")
		pe.retryAfter = 60
		return pe
	case errors.Is(err, batch.ErrInvalid):
		return invalidField("", "%s", err)
	case errors.Is(err, batch.ErrUnavailable):
		return problem(TypeUnavailable, "the batch store did not answer; try again")
	}
	return err
}

// createBatch is POST /v1/batches.
func (s *Server) createBatch(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	b, err := s.batches()
	if err != nil {
		return err
	}
	if _, err := mediaType(r, append(jsonlTypes, "text/plain")...); err != nil {
		return err
	}
	o := batch.CreateOptions{MaxOpenBytes: s.cfg.MaxTenantBatchBytes, Calibrations: s.lineCalibrations()}
	q := r.URL.Query()
	if v := q.Get("priority"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < schemas.MinPriority || n > schemas.MaxPriority {
			return problem(TypeBadRequest, "priority %q must be an integer from %d to %d", v, schemas.MinPriority, schemas.MaxPriority)
		}
		o.Priority = n
	}
	if v := q.Get("window"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > schemas.MaxBatchWindow {
			return problem(TypeBadRequest, "window %q must be an integer from 1 to %d", v, schemas.MaxBatchWindow)
		}
		o.Window = n
	}
	if v := q.Get("webhook"); v != "" {
		if err := checkWebhook("webhook", v); err != nil {
			return err
		}
		o.Webhook = v
	}
	// Lines under a limit run only work the fleet prices (pricing.Check),
	// and budgets are admitted at the fleet's prices.
	ctx, cancel := s.timeout(r.Context())
	if o.Prices, err = s.priceTable(ctx); err == nil {
		var q schemas.TenantQuota
		q, err = s.quotaOf(ctx, p.Tenant)
		o.SpendPerDayUSD = q.SpendPerDayUSD
	}
	cancel()
	if err != nil {
		return err
	}
	if err := limitBody(w, r, s.cfg.MaxBatchBytes); err != nil {
		return err
	}
	rec, err := b.Create(r.Context(), p.Tenant, r.Body, o)
	if err != nil {
		return batchErr(err)
	}
	w.Header().Set("Location", "/v1/batches/"+rec.ID)
	return writeJSON(w, http.StatusCreated, rec)
}

// listBatches is GET /v1/batches.
func (s *Server) listBatches(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	b, err := s.batches()
	if err != nil {
		return err
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	recs, err := b.List(ctx, p.Tenant)
	if err != nil {
		return batchErr(err)
	}
	if recs == nil {
		recs = []schemas.BatchRecord{}
	}
	return writeJSON(w, http.StatusOK, schemas.BatchList{Batches: recs})
}

// batchID is the batch a route names: a malformed id is no batch (404).
func batchID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if schemas.ValidBatchID(id) != nil {
		return "", problem(TypeNotFound, "no such batch")
	}
	return id, nil
}

// getBatch is GET /v1/batches/{id}.
func (s *Server) getBatch(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	return s.oneBatch(w, r, p, Batches.Get)
}

// cancelBatch is POST /v1/batches/{id}/cancel.
func (s *Server) cancelBatch(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	return s.oneBatch(w, r, p, Batches.Cancel)
}

func (s *Server) oneBatch(w http.ResponseWriter, r *http.Request, p apikey.Principal,
	fn func(Batches, context.Context, string, string) (schemas.BatchRecord, error)) error {
	b, err := s.batches()
	if err != nil {
		return err
	}
	id, err := batchID(r)
	if err != nil {
		return err
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	rec, err := fn(b, ctx, p.Tenant, id)
	if err != nil {
		return batchErr(err)
	}
	if err := s.batchWebhook(ctx, &rec); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, rec)
}

// batchOutput is GET /v1/batches/{id}/output.
func (s *Server) batchOutput(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	return s.batchFile(w, r, p, Batches.Output)
}

// batchErrors is GET /v1/batches/{id}/errors.
func (s *Server) batchErrors(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	return s.batchFile(w, r, p, Batches.Errors)
}

// batchFile streams one of a batch's JSONL files. The batch is looked up
// first, so an unknown one is a 404 problem, not an empty stream.
func (s *Server) batchFile(w http.ResponseWriter, r *http.Request, p apikey.Principal,
	fn func(Batches, context.Context, string, string, io.Writer) error) error {
	b, err := s.batches()
	if err != nil {
		return err
	}
	id, err := batchID(r)
	if err != nil {
		return err
	}
	gctx, cancel := s.timeout(r.Context())
	_, err = b.Get(gctx, p.Tenant, id)
	cancel()
	if err != nil {
		return batchErr(err)
	}
	// A large file outlives any write timeout, but a client that stops
	// reading is cut off after StreamWriteTimeout.
	dw := &deadlineWriter{w: w, rc: http.NewResponseController(w), d: s.cfg.StreamWriteTimeout}
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("Cache-Control", "no-store")
	cw := &countingWriter{w: dw}
	if err := fn(b, r.Context(), p.Tenant, id, cw); err != nil {
		if cw.n == 0 {
			return batchErr(err)
		}
		// Part of the file is sent: the connection is cut, so the client
		// sees a broken stream rather than a short file.
		s.log.Warn("api: batch file stream failed", "tenant", p.Tenant, "batch", id, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
