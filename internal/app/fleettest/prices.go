package fleettest

import (
	"context"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/schemas"
)

// SetPrice sets model's price in the fleet's price table ("": the default
// record, which prices the voters' own model) as the operator does, and
// waits until a watch of the table sees it (the coordinators' watches see
// it about as soon).
func (e *Env) SetPrice(model string, p schemas.Pricing) {
	e.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pricetable.Set(ctx, e.Topo.Prices, schemas.ModelPrice{
		Model: model, Default: model == "", InputUSDPerMTok: p.InputUSDPerMTok, OutputUSDPerMTok: p.OutputUSDPerMTok,
	}); err != nil {
		e.TB.Fatal(err)
	}
	e.awaitPrice(ctx, func(t pricing.Table) bool {
		got, ok := t.Price(model)
		return ok && got == p
	})
}

// UnsetPrice removes model's price ("": the default record) and waits
// until a watch of the table sees it gone.
func (e *Env) UnsetPrice(model string) {
	e.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pricetable.Unset(ctx, e.Topo.Prices, model); err != nil {
		e.TB.Fatal(err)
	}
	e.awaitPrice(ctx, func(t pricing.Table) bool {
		_, ok := t.Price(model)
		return !ok
	})
}

func (e *Env) awaitPrice(ctx context.Context, cond func(pricing.Table) bool) {
	e.TB.Helper()
	c := pricetable.NewCache(e.Topo.Prices)
	cctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		c.Wait()
	}()
	if err := c.Start(cctx); err != nil {
		e.TB.Fatal(err)
	}
	Eventually(e.TB, 10*time.Second, func() bool {
		t, _ := c.Table()
		return cond(t)
	}, "the price table's watch sees the change")
}
