package batch

import (
	"slices"
	"testing"
	"time"
)

func TestChoose(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	b := func(tenant string, n int) batchRef {
		return batchRef{key: tenant + "." + string(rune('a'+n)), tenant: tenant, created: at.Add(time.Duration(n) * time.Second)}
	}
	keys := func(bs []batchRef) []string {
		var out []string
		for _, x := range bs {
			out = append(out, x.key)
		}
		return out
	}
	set := func(bs ...batchRef) map[string]bool {
		m := map[string]bool{}
		for _, x := range bs {
			m[x.key] = true
		}
		return m
	}
	tests := []struct {
		name           string
		v              slotView
		take, handBack []string
	}{
		{
			name: "an empty runner takes one of each tenant, oldest first",
			v:    slotView{max: 3, tenants: 2, waiting: []batchRef{b("alpha", 0), b("alpha", 1), b("alpha", 2), b("beta", 5)}},
			take: []string{"alpha.a", "beta.f", "alpha.b"},
		},
		{
			name: "alone, a tenant takes every slot",
			v:    slotView{max: 2, tenants: 1, waiting: []batchRef{b("alpha", 2), b("alpha", 0), b("alpha", 1)}},
			take: []string{"alpha.a", "alpha.b"},
		},
		{
			name: "a free slot goes to the tenant with fewer fed here",
			v: slotView{max: 3, tenants: 2, fed: []batchRef{b("alpha", 0), b("alpha", 1)},
				waiting: []batchRef{b("alpha", 2), b("beta", 9)}},
			take: []string{"beta.j"},
		},
		{
			name: "full: the newest of the tenant over its share is handed back for a patient waiter",
			v: slotView{max: 4, tenants: 2, fed: []batchRef{b("alpha", 0), b("alpha", 3), b("alpha", 1), b("alpha", 2)},
				waiting: []batchRef{b("beta", 9)}, patient: set(b("beta", 9))},
			handBack: []string{"alpha.d"},
		},
		{
			name: "a waiter not yet patient hands nothing back",
			v: slotView{max: 2, tenants: 2, fed: []batchRef{b("alpha", 0), b("alpha", 1)},
				waiting: []batchRef{b("beta", 9)}},
		},
		{
			name: "hand back down to the share, most over first",
			v: slotView{max: 6, tenants: 3,
				fed:     []batchRef{b("alpha", 0), b("alpha", 1), b("alpha", 2), b("alpha", 3), b("beta", 4), b("beta", 5)},
				waiting: []batchRef{b("gamma", 6), b("gamma", 7), b("gamma", 8)}, patient: set(b("gamma", 6), b("gamma", 7), b("gamma", 8))},
			handBack: []string{"alpha.d", "alpha.c"},
		},
		{
			name: "a slot being handed back already serves the waiter",
			v: slotView{max: 2, tenants: 2, fed: []batchRef{b("alpha", 0), b("alpha", 1)}, leaving: set(b("alpha", 1)),
				waiting: []batchRef{b("beta", 9)}, patient: set(b("beta", 9))},
		},
		{
			name: "at its share nobody is handed back",
			v: slotView{max: 2, tenants: 2, fed: []batchRef{b("alpha", 0), b("beta", 1)},
				waiting: []batchRef{b("beta", 2), b("alpha", 3)}, patient: set(b("beta", 2), b("alpha", 3))},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := choose(tc.v)
			if got := keys(p.take); !slices.Equal(got, tc.take) {
				t.Errorf("take %v, want %v", got, tc.take)
			}
			if got := keys(p.handBack); !slices.Equal(got, tc.handBack) {
				t.Errorf("hand back %v, want %v", got, tc.handBack)
			}
		})
	}
}
