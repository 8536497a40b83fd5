package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestProvidersCommands(t *testing.T) {
	t.Parallel()
	maker := onFleet(t)
	sim := fleettest.StartSim(t, simllm.Config{Models: []string{"sim-strong"}})
	var list schemas.DeploymentList
	decodeOK(t, maker("providers", "set", "local", "--base-url", sim.URL(), "--model", "sim-1", "--rpm", "600",
		"--input", "0.4", "--cached-input", "0.1", "--output", "1.6", "--supports-n", "--json"), &list)
	if len(list.Deployments) != 1 || list.Deployments[0].RPM != 600 || !list.Deployments[0].SupportsN || list.Deployments[0].UpdatedAt.IsZero() {
		t.Fatalf("set: %+v", list)
	}
	file := filepath.Join(t.TempDir(), "deployments.json")
	if err := os.WriteFile(file, []byte(`{"deployments":[{"name":"wrong","base_url":"`+sim.URL()+`","model":"gpt-nope"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	decodeOK(t, maker("providers", "set", "--file", file, "--json"), &list)
	decodeOK(t, maker("providers", "list", "--json"), &list)
	if len(list.Deployments) != 2 || list.Deployments[0].Name != "local" || list.Deployments[1].Name != "wrong" {
		t.Fatalf("list: %+v", list)
	}
	var d schemas.Deployment
	decodeOK(t, maker("providers", "show", "local", "--json"), &d)
	if d.BaseURL != sim.URL() || d.OutputUSDPerMTok != 1.6 {
		t.Fatalf("show: %+v", d)
	}
	if o := maker("providers", "list"); o.code != ExitOK || !strings.Contains(o.stdout, "0.4/0.1/1.6") || !strings.Contains(o.stdout, "local") {
		t.Fatalf("text list: %d %q %q", o.code, o.stdout, o.stderr)
	}

	// check: the local deployment serves its model, the wrong one does not.
	if o := maker("providers", "check", "local"); o.code != ExitOK || !strings.Contains(o.stdout, "ok") {
		t.Errorf("check local: %d %q %q", o.code, o.stdout, o.stderr)
	}
	o := maker("providers", "check")
	if o.code != ExitError || !strings.Contains(o.stdout, "FAILED") || !strings.Contains(o.stdout, "404") ||
		!strings.Contains(o.stderr, "1 of 2 deployments do not serve their model") {
		t.Errorf("check all: %d %q %q", o.code, o.stdout, o.stderr)
	}

	for _, args := range [][]string{
		{"providers", "set", "x", "--base-url", sim.URL()},                                                         // no model
		{"providers", "set", "x", "--model", "m"},                                                                  // no URL
		{"providers", "set", "X Y", "--base-url", sim.URL(), "--model", "m"},                                       // bad name
		{"providers", "set", "x", "--base-url", sim.URL(), "--model", "m", "--api-key-env", "MAKER_NATS_PASSWORD"}, // a fleet secret
		{"providers", "set", "x", "--base-url", "https://user:sk-live@h/v1", "--model", "m"},                       // a key in the URL
		{"providers", "set", "x", "--base-url", "ftp://h/v1", "--model", "m"},                                      // scheme
		{"providers", "set", "x", "--base-url", sim.URL(), "--model", "m", "--rpm", "-5"},                          // negative
		{"providers", "set", "--file", file, "x"},                                                                  // both
		{"providers", "set"}, // nothing
	} {
		if o := maker(args...); o.code != ExitUsage {
			t.Errorf("%q: exit %d, want usage (%d): %s", args, o.code, ExitUsage, o.stderr)
		}
	}
	if o := maker("providers", "rm", "wrong"); o.code != ExitOK {
		t.Fatalf("rm: %d %s", o.code, o.stderr)
	}
	if o := maker("providers", "rm", "wrong"); o.code != ExitError || !strings.Contains(o.stderr, "no such deployment") {
		t.Errorf("rm twice: %d %q", o.code, o.stderr)
	}
	if o := maker("providers", "show", "wrong"); o.code != ExitError {
		t.Errorf("show a removed deployment: %d", o.code)
	}
}

// TestProvidersSecured: only the admin writes the registry. A leaked
// voter, coordinator or approver credential cannot point the voters'
// keys at a server of its choosing.
func TestProvidersSecured(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	as := func(id string, args ...string) outcome {
		return runMain(t, append(args, "--nats", srv.URL, "--nats-nkey", srv.Seed(id))...)
	}
	if res := as(auth.Admin, "topology", "create", "--judge=false"); res.code != ExitOK {
		t.Fatalf("topology create: %d %s", res.code, res.stderr)
	}
	set := []string{"providers", "set", "p", "--base-url", "https://api.example.invalid/v1", "--model", "m", "--api-key-env", "OPENAI_API_KEY"}
	if res := as(auth.Admin, set...); res.code != ExitOK {
		t.Fatalf("admin: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, id := range []string{auth.Voter, auth.Coordinator, auth.Approver} {
		res := as(id, append(set[:4:4], "https://attacker.example.invalid/v1", "--model", "m", "--api-key-env", "OPENAI_API_KEY")...)
		if res.code != ExitError || !strings.Contains(res.stderr, "permission denied") {
			t.Errorf("%s: exit %d, stderr %q; want permission denied", id, res.code, res.stderr)
		}
	}
	if res := as(auth.Voter, "providers", "show", "p", "--json"); res.code != ExitOK || !strings.Contains(res.stdout, "api.example.invalid") {
		t.Errorf("voter reads the registry: %d %q %q", res.code, res.stdout, res.stderr)
	}
}

// TestVoterOnDeployments: a voter with --providers calls the deployments
// of the registry, with --providers-file those of a file; with none
// serving its model it does not start, naming the model; with one it
// pulls. With neither, nor --llm-base-url, it is a usage error.
func TestVoterOnDeployments(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	if _, err := topology.Ensure(t.Context(), js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	sim := fleettest.StartSim(t, simllm.Config{Models: []string{"sim-strong"}})
	maker := func(args ...string) outcome { return runMain(t, append(args, "--nats", srv.URL)...) }
	ctx, cancel := context.WithTimeout(context.Background(), 2*modelCheckTimeout)
	defer cancel()
	voterRun := func(ctx context.Context, args ...string) (int, string) {
		var out, errb syncBuffer
		code := Main(ctx, append([]string{"voter", "--nats", srv.URL}, args...), &out, &errb)
		return code, errb.String()
	}

	if code, msg := voterRun(ctx, "--model", "sim-1"); code != ExitUsage || !strings.Contains(msg, "--llm-base-url is required (or --providers") {
		t.Errorf("neither a server nor deployments: exit %d, %q", code, msg)
	}
	if code, msg := voterRun(ctx, "--model", "sim-1", "--providers", "--providers-file", "/x.json"); code != ExitUsage {
		t.Errorf("--providers with --providers-file: exit %d, %q", code, msg)
	}
	if code, msg := voterRun(ctx, "--model", "sim-1", "--providers"); code != ExitError || !strings.Contains(msg, `no deployment serves the model: "sim-1"`) {
		t.Errorf("no deployment: exit %d, %q", code, msg)
	}
	if o := maker("providers", "set", "wrong", "--base-url", sim.URL(), "--model", "gpt-nope"); o.code != ExitOK {
		t.Fatal(o.stderr)
	}
	if code, msg := voterRun(ctx, "--model", "gpt-nope", "--providers"); code != ExitError || !strings.Contains(msg, `no deployment serves "gpt-nope" to this voter`) || !strings.Contains(msg, "404") {
		t.Errorf("a deployment that refuses the model: exit %d, %q", code, msg)
	}
	if code, msg := voterRun(ctx, "--llm-base-url", sim.URL(), "--providers-file", "/x.json", "--model", "m"); code != ExitUsage {
		t.Errorf("--llm-base-url with --providers-file: exit %d, %q", code, msg)
	}

	// A providers file, with the fleet's limits in Redis: it runs.
	file := filepath.Join(t.TempDir(), "deployments.json")
	if err := os.WriteFile(file, []byte(`{"deployments":[{"name":"local","base_url":"`+sim.URL()+`","model":"sim-1","rpm":6000}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	rd := testkit.StartRedis(t)
	rctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	var (
		code int
		msg  string
	)
	go func() {
		defer close(done)
		code, msg = voterRun(rctx, "--model", "sim-1", "--providers-file", file, "--limits-redis", rd.URL())
	}()
	pulling := func() bool {
		c, err := js.Consumer(t.Context(), bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters)
		if err != nil {
			return false
		}
		info, err := c.Info(t.Context())
		return err == nil && info.NumWaiting > 0
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		select {
		case <-done:
			return true
		default:
			return pulling()
		}
	}, "the voter on a providers file is not pulling")
	stop()
	<-done
	if code != ExitOK || !strings.Contains(msg, "voter calls models through deployments") || !strings.Contains(msg, "fleet_limits=true") {
		t.Errorf("voter on a providers file: exit %d, %s", code, msg)
	}
}
