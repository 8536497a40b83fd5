package auth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
)

// TestAuthFormerTenantSeed: a directory made by an earlier release holds a
// tenant identity's seed. Init keeps the roles, names the old seed, and
// auth.conf no longer lets it connect: tenants come in only through maker
// serve, so a leaked tenant seed reaches nothing on the bus.
func TestAuthFormerTenantSeed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	old := filepath.Join(dir, "tenant-beta"+auth.SeedExt)
	if err := os.WriteFile(old, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := auth.Init(auth.InitConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.FormerTenantSeeds) != 1 || res.FormerTenantSeeds[0] != old {
		t.Errorf("former tenant seeds %v, want [%s]", res.FormerTenantSeeds, old)
	}
	if len(res.Identities) != len(auth.Roles) {
		t.Errorf("%d identities, want the %d roles", len(res.Identities), len(auth.Roles))
	}
	pub, _ := kp.PublicKey()
	conf, err := os.ReadFile(res.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(conf), pub) {
		t.Fatal("auth.conf still names the former tenant identity")
	}
	srv := authtest.StartConf(t, dir, "include ./"+auth.ConfigFile+"\n")
	nc, err := bus.Connect(srv.URL, "former-tenant", bus.Auth{NKey: old})
	if err == nil {
		nc.Close()
		t.Fatal("a former tenant seed connected")
	}
	if !errors.Is(err, bus.ErrPermission) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("connect with a former tenant seed: %v, want an authorization error", err)
	}
}
