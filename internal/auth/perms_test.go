package auth_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/bus"
)

func TestAuthValidIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"coordinator", true}, {"voter", true}, {"judge", true}, {"approver", true}, {"api", true}, {"admin", true},
		// Tenants have no NATS identity (they use maker serve's keys).
		{"tenant-alpha", false}, {"tenant-a-1", false},
		{"tenant-", false}, {"tenant-Alpha", false}, {"tenant-a.b", false}, {"root", false}, {"", false},
	} {
		err := auth.ValidIdentity(tc.id)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, auth.ErrIdentity)) {
			t.Errorf("ValidIdentity(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}

// TestAuthPermissionsShape: properties every generated permission set
// keeps, whatever the namespace: only the admin may use everything, each
// identity subscribes under its own inbox and no other, and only voters
// publish results.
func TestAuthPermissionsShape(t *testing.T) {
	t.Parallel()
	for _, ns := range []bus.Namespace{"", "team-b"} {
		for _, id := range auth.Roles {
			p, err := auth.PermissionsOf(ns, id)
			if err != nil {
				t.Fatal(err)
			}
			all := append(append(slices.Clone(p.Publish.Allow), p.Subscribe.Allow...), p.Publish.Deny...)
			if id == auth.Admin {
				if !slices.Contains(p.Publish.Allow, ">") || !slices.Contains(p.Subscribe.Allow, ">") {
					t.Errorf("admin: %+v", p)
				}
				continue
			}
			for _, s := range all {
				if s == ">" || strings.HasPrefix(s, "_INBOX.") && s != "_INBOX."+id+".>" {
					t.Errorf("%s (ns %q) may use %s", id, ns, s)
				}
			}
			if !slices.Contains(p.Subscribe.Allow, "_INBOX."+id+".>") {
				t.Errorf("%s (ns %q) cannot read its inbox", id, ns)
			}
			if slices.Contains(p.Publish.Allow, ns.String()+".v1.result.>") != (id == auth.Voter) {
				t.Errorf("%s (ns %q): results publishable: %v", id, ns, !(id == auth.Voter))
			}
		}
	}
	if _, err := auth.PermissionsOf("", "tenant-alpha"); !errors.Is(err, auth.ErrIdentity) || !strings.Contains(err.Error(), "maker keys create") {
		t.Errorf("tenant-alpha: %v, want ErrIdentity pointing at API keys", err)
	}
}

// TestAuthGuardedBuckets: who may write the quotas, the API keys, the
// batch records, the prices and the provider registry, as the rules say (the refusals themselves are tested on
// a real server in TestAuthRefusedService).
func TestAuthGuardedBuckets(t *testing.T) {
	t.Parallel()
	ns := bus.DefaultNamespace
	writes := func(id, bucket string) bool {
		p, err := auth.PermissionsOf(ns, id)
		if err != nil {
			t.Fatal(err)
		}
		w := "$KV." + bucket + ".>"
		return (slices.Contains(p.Publish.Allow, w) || slices.Contains(p.Publish.Allow, ">")) && !slices.Contains(p.Publish.Deny, w)
	}
	for _, tc := range []struct {
		id                                          string
		quotas, apikeys, batches, prices, providers bool
	}{
		{auth.Admin, true, true, true, true, true},
		{auth.API, true, false, true, true, false}, // admin keys' routes
		{auth.Coordinator, false, false, true, false, false},
		{auth.Voter, false, false, false, false, false},
		{auth.Judge, false, false, false, false, false},
		{auth.Approver, false, false, false, false, false},
	} {
		for _, b := range []struct {
			bucket string
			want   bool
		}{{ns.QuotasBucket(), tc.quotas}, {ns.APIKeysBucket(), tc.apikeys}, {ns.BatchesBucket(), tc.batches}, {ns.PricesBucket(), tc.prices}, {ns.ProvidersBucket(), tc.providers}} {
			if got := writes(tc.id, b.bucket); got != b.want {
				t.Errorf("%s writes every key of %s: %v, want %v", tc.id, b.bucket, got, b.want)
			}
		}
	}
}
