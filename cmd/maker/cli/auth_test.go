package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// TestAuthInit: maker auth init makes a seed (0600) per fleet role and
// the auth.conf nats-server reads; it keeps seeds on a re-run and rotates
// them with --force. Tenants have no NATS identity: --tenant is refused
// with a pointer to API keys, and a tenant seed an earlier release made is
// named on stderr.
func TestAuthInit(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "secrets")
	res := runMain(t, "auth", "init", "--dir", dir)
	if res.code != ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	ids := []string{"coordinator", "voter", "judge", "approver", "api", "admin"}
	seeds := map[string][]byte{}
	for _, id := range ids {
		path := filepath.Join(dir, id+".nk")
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, fi.Mode().Perm())
		}
		if seeds[id], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(res.stdout, id) {
			t.Errorf("output does not name %s:\n%s", id, res.stdout)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir: %v %v, want 0700", fi.Mode(), err)
	}
	for _, want := range []string{"include", "--nats-nkey " + filepath.Join(dir, "coordinator.nk"), "--nats-nkey " + filepath.Join(dir, "api.nk"),
		"maker keys create --tenant T", "maker submit --api http://HOST:8000 --api-key KEY"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("output does not say %q:\n%s", want, res.stdout)
		}
	}
	if strings.Contains(res.stdout, "tenant-") {
		t.Errorf("output names a tenant identity:\n%s", res.stdout)
	}
	// The config is what nats-server reads.
	authtest.StartConf(t, dir, "include ./"+auth.ConfigFile+"\n")

	// A tenant: refused, pointing at API keys; nothing changes.
	res = runMain(t, "auth", "init", "--dir", dir, "--tenant", "gamma")
	if res.code != ExitUsage || !strings.Contains(res.stderr, "maker keys create --tenant gamma") || res.stdout != "" {
		t.Fatalf("--tenant: exit %d, stdout %q, stderr %q; want exit %d pointing at maker keys create --tenant gamma", res.code, res.stdout, res.stderr, ExitUsage)
	}
	if _, err := os.Stat(filepath.Join(dir, "tenant-gamma.nk")); err == nil {
		t.Error("--tenant made a tenant seed")
	}

	// Again, with a seed an earlier release made for a tenant: the seeds are
	// kept, the old one is named, auth.conf names only the roles.
	old := filepath.Join(dir, "tenant-alpha.nk")
	if err := os.WriteFile(old, seeds["voter"], 0o600); err != nil {
		t.Fatal(err)
	}
	res = runMain(t, "auth", "init", "--dir", dir)
	if res.code != ExitOK || !strings.Contains(res.stderr, old) || !strings.Contains(res.stderr, "API key") {
		t.Fatalf("re-run with an old tenant seed: exit %d, stderr %q; want it named", res.code, res.stderr)
	}
	for _, id := range ids {
		now, err := os.ReadFile(filepath.Join(dir, id+".nk"))
		if err != nil || !bytes.Equal(now, seeds[id]) {
			t.Errorf("%s's seed changed on a re-run (%v)", id, err)
		}
	}
	conf, err := os.ReadFile(filepath.Join(dir, auth.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !strings.Contains(string(conf), "# "+id+"\n") {
			t.Errorf("auth.conf lacks %s", id)
		}
	}
	if strings.Contains(string(conf), "tenant-") {
		t.Errorf("auth.conf names a tenant identity:\n%s", conf)
	}
	// --force rotates every seed.
	res = runMain(t, "auth", "init", "--dir", dir, "--force")
	if res.code != ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "voter.nk")); bytes.Equal(now, seeds["voter"]) {
		t.Error("--force kept the voter's seed")
	}

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no dir", []string{"auth", "init"}},
		{"a tenant", []string{"auth", "init", "--dir", t.TempDir(), "--tenant", "alpha"}},
		{"bad namespace", []string{"auth", "init", "--dir", t.TempDir(), "--namespace", "NS!"}},
		{"creds and nkey", []string{"auth", "init", "--dir", t.TempDir(), "--nats-nkey", filepath.Join(dir, "voter.nk"), "--nats-creds", filepath.Join(dir, "voter.nk")}},
		{"missing seed", []string{"task", "list", "--nats-nkey", filepath.Join(dir, "nobody.nk")}},
		{"cert without key", []string{"task", "list", "--nats-tls-cert", filepath.Join(dir, "voter.nk")}},
	} {
		if res := runMain(t, tc.args...); res.code != ExitUsage {
			t.Errorf("%s: exit %d, want %d: %s", tc.name, res.code, ExitUsage, res.stderr)
		}
	}
}

// TestAuthPermissionDenied: a command the server refuses says so, naming
// what was refused, rather than timing out in silence.
func TestAuthPermissionDenied(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	c := srv.Connect(t, auth.Coordinator)
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join("..", "..", "..", "examples", "tasks", "multiply.yaml")
	// A voter may read task specs, not register them.
	res := runMain(t, "task", "register", spec, "--nats", srv.URL, "--nats-nkey", srv.Seed(auth.Voter))
	if res.code != ExitError || !strings.Contains(res.stderr, "permission denied: publish to $KV.maker_tasks.") ||
		!strings.Contains(res.stderr, "NATS identity voter") {
		t.Fatalf("exit %d, stderr %q; want a permission denied on $KV.maker_tasks.* naming the voter", res.code, res.stderr)
	}
	t.Logf("as the voter: %s", res.stderr)
	// The admin may.
	res = runMain(t, "task", "register", spec, "--nats", srv.URL, "--nats-nkey", srv.Seed(auth.Admin))
	if res.code != ExitOK {
		t.Fatalf("admin: exit %d: %s", res.code, res.stderr)
	}
	if res := runMain(t, "task", "list", "--nats", srv.URL, "--nats-nkey", srv.Seed(auth.Voter)); res.code != ExitOK || !strings.Contains(res.stdout, "multiply") {
		t.Fatalf("voter lists task specs: exit %d: %s%s", res.code, res.stdout, res.stderr)
	}
}

// TestAuthEnv: the --nats-* flags come from the environment too. Not
// parallel: it sets the environment every command reads.
func TestAuthEnv(t *testing.T) {
	srv := authtest.Start(t)
	c := srv.Connect(t, auth.Coordinator)
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MAKER_NATS_URL", srv.URL)
	t.Setenv("MAKER_NATS_NKEY", srv.Seed(auth.Voter))
	spec := filepath.Join("..", "..", "..", "examples", "tasks", "multiply.yaml")
	if res := runMain(t, "task", "register", spec); res.code != ExitError || !strings.Contains(res.stderr, "NATS identity voter") {
		t.Fatalf("as the voter: exit %d: %s", res.code, res.stderr)
	}
	t.Setenv("MAKER_NATS_NKEY", srv.Seed(auth.Admin))
	if res := runMain(t, "task", "register", spec); res.code != ExitOK {
		t.Fatalf("as the admin: exit %d: %s", res.code, res.stderr)
	}
	t.Setenv("MAKER_NATS_NKEY", "")
	if res := runMain(t, "task", "list"); res.code == ExitOK {
		t.Fatal("listed without an identity")
	}
}

// TestConnRedactCLI: a failed connect names the server without its
// password (finding 5), whatever the command.
func TestConnRedactCLI(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		Username: "bob", Password: "right-pass"})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("not ready")
	}
	free, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{
		"nats://bob:Hunter2-Secret@" + ns.Addr().String(),
		"nats://bob:Hunter2-Secret@127.0.0.1:" + strconv.Itoa(free),
	} {
		for _, args := range [][]string{{"jobs", "list"}, {"status", "j1"}, {"task", "list"}, {"dlq", "list"}, {"judge", "pending"}} {
			res := runMain(t, append(args, "--nats", url)...)
			if res.code == ExitOK || strings.Contains(res.stderr+res.stdout, "Hunter2") {
				t.Errorf("%v on %s: exit %d, printed the password or connected: %s", args, bus.RedactURL(url), res.code, res.stderr)
			}
		}
	}
}

// TestConnCreds: a fleet in operator mode (JWTs, a memory resolver) is
// reached with --nats-creds.
func TestConnCreds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	sys, _ := nkeys.CreateAccount()
	sysPub, _ := sys.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "maker-test"
	oc.SystemAccount = sysPub // JetStream needs one
	opJWT, err := oc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	acc, _ := nkeys.CreateAccount()
	accPub, _ := acc.PublicKey()
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "fleet"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	creds := func(name string) string {
		user, _ := nkeys.CreateUser()
		userPub, _ := user.PublicKey()
		uc := jwt.NewUserClaims(userPub)
		uc.Name = name
		userJWT, err := uc.Encode(acc)
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := user.Seed()
		data, err := jwt.FormatUserConfig(userJWT, seed)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".creds")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	srv := authtest.StartConf(t, dir, fmt.Sprintf("operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %s\n  %s: %s\n}\n",
		opJWT, sysPub, accPub, accJWT, sysPub, sysJWT))
	admin := creds("admin")
	nc, err := bus.Connect(srv.URL, "creds-test", bus.Auth{Creds: admin})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if res := runMain(t, "task", "list", "--nats", srv.URL, "--nats-creds", creds("voter")); res.code != ExitOK {
		t.Fatalf("with --nats-creds: exit %d: %s", res.code, res.stderr)
	}
	if res := runMain(t, "task", "list", "--nats", srv.URL); res.code == ExitOK || !strings.Contains(strings.ToLower(res.stderr), "authorization") {
		t.Fatalf("without creds: exit %d: %s", res.code, res.stderr)
	}
}

// TestConnMutualTLS: a server that verifies client certificates is
// reached with --nats-tls-cert, --nats-tls-key and --nats-tls-ca.
func TestConnMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki := testkit.WriteTLSFiles(t)
	srv := authtest.StartConf(t, dir, fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n  timeout: 5\n}\n",
		pki.ServerCert, pki.ServerKey, pki.CA))
	url := "tls://127.0.0.1:" + strconv.Itoa(srv.Server.Addr().(*net.TCPAddr).Port)
	tlsAuth := bus.Auth{TLSCert: pki.ClientCert, TLSKey: pki.ClientKey, TLSCA: pki.CA}
	nc, err := bus.Connect(url, "tls-test", tlsAuth)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	res := runMain(t, "task", "list", "--nats", url,
		"--nats-tls-cert", pki.ClientCert, "--nats-tls-key", pki.ClientKey, "--nats-tls-ca", pki.CA)
	if res.code != ExitOK {
		t.Fatalf("with the client certificate: exit %d: %s", res.code, res.stderr)
	}
	if res := runMain(t, "task", "list", "--nats", url, "--nats-tls-ca", pki.CA); res.code == ExitOK {
		t.Fatal("connected without a client certificate")
	}
}

// TestAuthRun: maker run on a secured server joins it, with every role of
// its in-process fleet, on the identity its flags name.
func TestAuthRun(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	if res := runMain(t, "run", "--task", "hanoi", "--disks", "3", "--nats", srv.URL); res.code == ExitOK {
		t.Fatal("ran without an identity on a secured server")
	}
	res := runMain(t, "run", "--task", "hanoi", "--disks", "3", "--nats", srv.URL, "--nats-nkey", srv.Seed(auth.Admin))
	if res.code != ExitOK || !strings.Contains(res.stdout, "SOLVED") {
		t.Fatalf("exit %d: %s%s", res.code, res.stdout, res.stderr)
	}
}
