package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// TestKeysCommands: maker keys create prints a key once (JSON or text),
// which authenticates; list shows records and never a key; revoke by
// prefix refuses the key from then on; bad input exits 2 with nothing
// written; a server without a fleet says how to get one.
func TestKeysCommands(t *testing.T) {
	t.Parallel()
	url := testkit.StartNATS(t).URL
	if res := runMain(t, "keys", "create", "--tenant", "alpha", "--nats", url); res.code != ExitError ||
		!strings.Contains(res.stderr, "start a coordinator, or run maker topology create") {
		t.Fatalf("create without a fleet: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := runMain(t, "topology", "create", "--judge=false", "--nats", url); res.code != ExitOK {
		t.Fatalf("topology create: %d %s", res.code, res.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, js := testkit.Connect(t, url)
	topo, err := topology.Open(ctx, js, topology.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := apikey.New(topo)

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no tenant", nil, "--tenant is required"},
		{"bad tenant", []string{"--tenant", "Alpha Corp"}, "tenant"},
		{"negative rate", []string{"--tenant", "alpha", "--rate", "-1"}, "rate_per_sec"},
		{"long name", []string{"--tenant", "alpha", "--name", strings.Repeat("n", 65)}, "name"},
		{"an argument", []string{"--tenant", "alpha", "extra"}, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runMain(t, append(append([]string{"keys", "create"}, tc.args...), "--nats", url)...)
			if res.code != ExitUsage || !strings.Contains(res.stderr, tc.want) || res.stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d naming %s", res.code, res.stdout, res.stderr, ExitUsage, tc.want)
			}
		})
	}

	res := runMain(t, "keys", "create", "--tenant", "alpha", "--admin", "--name", "ops", "--rate", "5", "--burst", "10", "--json", "--nats", url)
	if res.code != ExitOK {
		t.Fatalf("create --json: exit %d, stderr %q", res.code, res.stderr)
	}
	var made createdKey
	if err := json.Unmarshal([]byte(res.stdout), &made); err != nil {
		t.Fatalf("create --json printed %q: %v", res.stdout, err)
	}
	p, err := store.Authenticate(ctx, made.Key)
	if err != nil || p != (apikey.Principal{KeyID: made.KeyID, Tenant: "alpha", Admin: true, Name: "ops", RatePerSec: 5, Burst: 10}) {
		t.Fatalf("the printed key authenticates as %+v, %v (printed %+v)", p, err, made)
	}
	// An approver key: a person's, deciding as its name.
	res = runMain(t, "keys", "create", "--tenant", "alpha", "--approver", "--name", "alice", "--nats", url)
	approverKey := strings.TrimSuffix(res.stdout, "\n")
	if res.code != ExitOK || !strings.Contains(res.stderr, "approver deciding as alice") {
		t.Fatalf("create --approver: exit %d, stderr %q", res.code, res.stderr)
	}
	if p, err := store.Authenticate(ctx, approverKey); err != nil || !p.Approver || p.Admin || p.Person() != "alice" || p.Tenant != "alpha" {
		t.Fatalf("the approver key authenticates as %+v, %v", p, err)
	}
	if res := runMain(t, "keys", "list", "--tenant", "alpha", "--nats", url); res.code != ExitOK ||
		!strings.Contains(res.stdout, "APPROVER") || !strings.Contains(res.stdout, "alice") {
		t.Fatalf("list shows the approver: exit %d, stdout %q", res.code, res.stdout)
	}
	if _, err := store.Revoke(ctx, approverKey); err != nil {
		t.Fatal(err)
	}

	res = runMain(t, "keys", "create", "--tenant", "beta", "--nats", url)
	key := strings.TrimSuffix(res.stdout, "\n")
	if res.code != ExitOK || strings.Count(res.stdout, "\n") != 1 || !strings.Contains(res.stderr, "shown this once") || strings.Contains(res.stderr, key) {
		t.Fatalf("create: exit %d, stdout %q, stderr %q: want the key alone on stdout and the note on stderr", res.code, res.stdout, res.stderr)
	}
	if p, err := store.Authenticate(ctx, key); err != nil || p.Tenant != "beta" || p.Admin {
		t.Fatalf("the printed key authenticates as %+v, %v", p, err)
	}
	prefix := key[:len("mk_")+12]

	listed := func(args ...string) []keyView {
		t.Helper()
		res := runMain(t, append(append([]string{"keys", "list", "--json"}, args...), "--nats", url)...)
		if res.code != ExitOK {
			t.Fatalf("list: exit %d, stderr %q", res.code, res.stderr)
		}
		for _, k := range []string{made.Key, key} {
			if strings.Contains(res.stdout, k[len(prefix):]) {
				t.Fatalf("list shows a key: %s", res.stdout)
			}
		}
		var out []keyView
		if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
			t.Fatalf("list printed %q: %v", res.stdout, err)
		}
		return out
	}
	if all := listed(); len(all) != 3 || all[0].KeyID != made.KeyID || !all[1].Approver || all[2].Prefix != prefix {
		t.Errorf("list: %+v", all)
	}
	if beta := listed("--tenant", "beta"); len(beta) != 1 || beta[0].Tenant != "beta" || beta[0].RevokedAt != nil {
		t.Errorf("list --tenant beta: %+v", beta)
	}
	if res := runMain(t, "keys", "list", "--nats", url); res.code != ExitOK || !strings.Contains(res.stdout, prefix) || !strings.Contains(res.stdout, "PREFIX") {
		t.Errorf("list: exit %d, stdout %q", res.code, res.stdout)
	}

	res = runMain(t, "keys", "revoke", prefix, "--nats", url)
	if res.code != ExitOK || !strings.Contains(res.stdout, "revoked "+prefix+" (tenant beta)") {
		t.Fatalf("revoke: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if _, err := store.Authenticate(ctx, key); !errors.Is(err, apikey.ErrUnauthorized) {
		t.Errorf("the revoked key: %v", err)
	}
	if beta := listed("--tenant", "beta"); len(beta) != 1 || beta[0].RevokedAt == nil {
		t.Errorf("list after revoke: %+v", beta)
	}
	for _, tc := range []struct {
		ref  string
		code int
		want string
	}{
		{"0123456789ab", ExitError, "no such key: mk_0123456789ab"},
		{"not-a-key", ExitUsage, "is not a key id"},
		{made.Key + "x", ExitUsage, "is not a key id"},
	} {
		res := runMain(t, "keys", "revoke", tc.ref, "--nats", url)
		if res.code != tc.code || !strings.Contains(res.stderr, tc.want) || strings.Contains(res.stderr, made.Key[len(prefix):]) {
			t.Errorf("revoke %q: exit %d, stderr %q; want %d, %q, no secret", tc.ref, res.code, res.stderr, tc.code, tc.want)
		}
	}
	if res := runMain(t, "keys", "revoke", "--nats", url); res.code != ExitUsage {
		t.Errorf("revoke without a key: exit %d", res.code)
	}
}

// TestKeysSecured: on a secured fleet the admin makes and revokes keys;
// the voter's identity and the api's are refused by the server, at once.
func TestKeysSecured(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	as := func(id string, args ...string) outcome {
		return runMain(t, append(args, "--nats", srv.URL, "--nats-nkey", srv.Seed(id))...)
	}
	if res := as(auth.Admin, "topology", "create", "--judge=false"); res.code != ExitOK {
		t.Fatalf("topology create: %d %s", res.code, res.stderr)
	}
	res := as(auth.Admin, "keys", "create", "--tenant", "alpha", "--json")
	if res.code != ExitOK {
		t.Fatalf("admin: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, id := range []string{auth.Voter, auth.API} {
		res := as(id, "keys", "create", "--tenant", "alpha")
		if res.code != ExitError || !strings.Contains(res.stderr, "permission denied") || res.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want permission denied", id, res.code, res.stdout, res.stderr)
		}
	}
	if res := as(auth.API, "keys", "list", "--json"); res.code != ExitOK || !strings.Contains(res.stdout, `"tenant": "alpha"`) {
		t.Errorf("api lists the keys: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	var made createdKey
	if err := json.Unmarshal([]byte(res.stdout), &made); err != nil {
		t.Fatal(err)
	}
	if res := as(auth.API, "keys", "revoke", made.KeyID); res.code != ExitError || !strings.Contains(res.stderr, "permission denied") {
		t.Errorf("api revokes: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := as(auth.Admin, "keys", "revoke", made.KeyID); res.code != ExitOK {
		t.Errorf("admin revokes: exit %d, stderr %q", res.code, res.stderr)
	}
}
