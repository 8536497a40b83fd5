package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/schemas"
)

// The fleet's price table (internal/pricetable): every key may read it (a
// tenant sees what its work costs); admin keys set and remove prices. A
// model's name is one path segment: a name holding '/' is sent
// percent-encoded (openai%2Fgpt-5.5); "default" names the default record,
// which prices the voters' own model.

// defaultModel is the path segment of the default record.
const defaultModel = "default"

// priceTable is the fleet's price table now: the server's cache (Deps.Prices)
// or, without one, the bucket.
func (s *Server) priceTable(ctx context.Context) (pricing.Table, error) {
	if s.deps.Prices != nil {
		t, err := s.deps.Prices.Current(ctx)
		if err != nil {
			return pricing.Table{}, fmt.Errorf("%w: prices: %w", jobs.ErrUnavailable, err)
		}
		return t, nil
	}
	t, err := pricetable.Load(ctx, s.deps.Topo.Prices)
	if err != nil {
		return pricing.Table{}, fmt.Errorf("%w: prices: %w", jobs.ErrUnavailable, err)
	}
	return t, nil
}

// listPrices is GET /v1/prices: the table, the default record first. Read
// from the bucket, so an admin sees what they just set.
func (s *Server) listPrices(w http.ResponseWriter, r *http.Request, _ apikey.Principal) error {
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	t, err := pricetable.Load(ctx, s.deps.Topo.Prices)
	if err != nil {
		return fmt.Errorf("%w: prices: %w", jobs.ErrUnavailable, err)
	}
	return writeJSON(w, http.StatusOK, schemas.PriceList{Prices: t.Records()})
}

// priceModel is the model a price route names ("" for the default record).
func priceModel(r *http.Request) (string, error) {
	m := r.PathValue("model")
	if m == defaultModel {
		return "", nil
	}
	if err := schemas.CheckModelName(m); err != nil {
		return "", problem(TypeNotFound, "no model %q: %s", m, detailOf(err))
	}
	return m, nil
}

// putPrice is PUT /v1/prices/{model} (admin): the model's price per
// million tokens; model, default, kind and version may be left out. Every
// coordinator prices the model's samples at it within a second.
func (s *Server) putPrice(w http.ResponseWriter, r *http.Request, _ apikey.Principal) error {
	model, err := priceModel(r)
	if err != nil {
		return err
	}
	var p schemas.ModelPrice
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &p); err != nil {
		return err
	}
	switch {
	case p.Kind != "" && p.Kind != schemas.KindModelPrice || p.Version != 0 && p.Version != schemas.Version:
		return invalidField("/kind", "kind and version, when given, must be %s and %d", schemas.KindModelPrice, schemas.Version)
	case p.Model != "" && p.Model != model:
		return invalidField("/model", "model %q is not the path's %q; leave it out", p.Model, r.PathValue("model"))
	case p.Default && model != "":
		return invalidField("/default", "the default record is set at /v1/prices/%s", defaultModel)
	}
	p.Model, p.Default = model, model == ""
	p.Header = schemas.NewHeader(schemas.KindModelPrice)
	if err := p.Validate(); err != nil {
		return invalidField(fieldPath(err), "%s", detailOf(err))
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	out, err := pricetable.Set(ctx, s.deps.Topo.Prices, p)
	if err != nil {
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	return writeJSON(w, http.StatusOK, out)
}

// deletePrice is DELETE /v1/prices/{model} (admin): the model is unpriced
// from then on (jobs under a limit that ask it pause).
func (s *Server) deletePrice(w http.ResponseWriter, r *http.Request, _ apikey.Principal) error {
	model, err := priceModel(r)
	if err != nil {
		return err
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	switch err := pricetable.Unset(ctx, s.deps.Topo.Prices, model); {
	case errors.Is(err, pricetable.ErrNotFound):
		return problem(TypeNotFound, "no price set for %s", pricing.Name(model))
	case err != nil:
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkPriced refuses (422, unpriced) a job under a limit (its budget, or
// its tenant's spend quota q) that asks a model the fleet does not price.
func checkPriced(t pricing.Table, spec *schemas.JobSpec, q schemas.TenantQuota) error {
	if err := pricing.Check(t, spec, q.SpendPerDayUSD); err != nil {
		return problem(TypeUnpriced, "%s", detailOf(err))
	}
	return nil
}
