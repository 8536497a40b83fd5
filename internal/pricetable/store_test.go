package pricetable_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestStore: records are validated and stored under a key any model name
// makes (hostile ones included), read back only for the model they name,
// listed, removed; a started cache follows every change.
func TestStore(t *testing.T) {
	t.Parallel()
	_, topo := testkit.StartTopology(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv := topo.Prices

	for _, bad := range []schemas.ModelPrice{
		{Model: "m", InputUSDPerMTok: -1}, {Model: "m", OutputUSDPerMTok: 1e7}, {Model: ""}, {Model: "m\r\nX-Admin: 1"},
	} {
		if _, err := pricetable.Set(ctx, kv, bad); !errors.Is(err, pricetable.ErrInvalid) {
			t.Errorf("Set(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	cache := pricetable.NewCache(kv)
	cctx, stop := context.WithCancel(ctx)
	defer func() { stop(); cache.Wait() }()
	if err := cache.Start(cctx); err != nil {
		t.Fatal(err)
	}
	if tb, live := cache.Table(); !live || !tb.Empty() {
		t.Fatalf("a new fleet's table: live %v, empty %v", live, tb.Empty())
	}

	hostile := []string{
		"openai/gpt-5.5", "a.b.c", "with space", "*", ">", "model.default", "default", "_default", "..",
		strings.Repeat("long-", 40), "модель", "$KV.maker_apikeys.x", "a=b",
	}
	keys := map[string]string{pricetable.DefaultKey: ""}
	for i, m := range hostile {
		p, err := pricetable.Set(ctx, kv, schemas.ModelPrice{Model: m, InputUSDPerMTok: float64(i + 1), OutputUSDPerMTok: 1})
		if err != nil {
			t.Fatalf("Set(%q): %v", m, err)
		}
		if p.UpdatedAt.IsZero() || p.Kind != schemas.KindModelPrice {
			t.Errorf("Set(%q) returned %+v without header or time", m, p)
		}
		k := pricetable.Key(m)
		if other, dup := keys[k]; dup {
			t.Errorf("%q and %q share the key %s", m, other, k)
		}
		keys[k] = m
	}
	if _, err := pricetable.Set(ctx, kv, schemas.ModelPrice{Default: true, InputUSDPerMTok: 0.5, OutputUSDPerMTok: 0.5}); err != nil {
		t.Fatal(err)
	}
	for i, m := range hostile {
		p, err := pricetable.Get(ctx, kv, m)
		if err != nil || p.Model != m || p.InputUSDPerMTok != float64(i+1) {
			t.Errorf("Get(%q) = %+v, %v", m, p, err)
		}
	}
	if p, err := pricetable.Get(ctx, kv, ""); err != nil || !p.Default || p.InputUSDPerMTok != 0.5 {
		t.Errorf("the default record: %+v, %v", p, err)
	}
	table, err := pricetable.Load(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(table.Records()); got != len(hostile)+1 {
		t.Errorf("Load: %d records, want %d", got, len(hostile)+1)
	}
	if recs := table.Records(); !recs[0].Default {
		t.Errorf("Records: %+v, want the default record first", recs[0])
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		tb, _ := cache.Table()
		p, ok := tb.Price("default")
		return ok && p.InputUSDPerMTok == float64(7) && len(tb.Records()) == len(hostile)+1
	}, "the cache has the table")

	// A record stored under another model's key by hand prices nothing
	// for the model the key names.
	if _, err := kv.Put(ctx, pricetable.Key("victim"), mustEncode(t, schemas.ModelPrice{Header: schemas.NewHeader(schemas.KindModelPrice),
		Model: "other", InputUSDPerMTok: 1, OutputUSDPerMTok: 1, UpdatedAt: time.Now()})); err != nil {
		t.Fatal(err)
	}
	if _, err := pricetable.Get(ctx, kv, "victim"); !errors.Is(err, pricetable.ErrNotFound) {
		t.Errorf("Get(victim) of a record naming another model = %v, want ErrNotFound", err)
	}

	if err := pricetable.Unset(ctx, kv, ""); err != nil {
		t.Fatal(err)
	}
	if err := pricetable.Unset(ctx, kv, ""); !errors.Is(err, pricetable.ErrNotFound) {
		t.Errorf("unset twice: %v, want ErrNotFound", err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		tb, _ := cache.Table()
		_, ok := tb.Price("")
		return !ok
	}, "the cache dropped the default record")
	// Garbage written around the store does not replace a price.
	if _, err := kv.Put(ctx, pricetable.Key("a.b.c"), []byte(`{"kind":"model_price","version":1,"model":"a.b.c","input_usd_per_mtok":-1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, pricetable.Key("default"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := pricetable.Unset(ctx, kv, "with space"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		tb, _ := cache.Table()
		_, gone := tb.Price("with space")
		return !gone
	}, "the cache dropped a model's record")
	tb, _ := cache.Table()
	if p, ok := tb.Price("a.b.c"); !ok || p.InputUSDPerMTok != 2 {
		t.Errorf("a.b.c after garbage: %+v %v, want its price kept", p, ok)
	}
	if p, ok := tb.Price("default"); !ok || p.InputUSDPerMTok != 7 {
		t.Errorf("model \"default\" after garbage: %+v %v, want its price kept", p, ok)
	}
}

func mustEncode(t *testing.T, p schemas.ModelPrice) []byte {
	t.Helper()
	data, err := schemas.Encode(&p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
