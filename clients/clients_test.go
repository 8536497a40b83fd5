package clients_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/client/httpapi"
	"github.com/makerfleet/makerfleet/clients/internal/tsgen"
	"github.com/makerfleet/makerfleet/cmd/maker/cli"
	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

const (
	tsDir = "typescript"
	pyDir = "python"
	// scriptTimeout bounds one language's checks: a few small jobs, a
	// batch and a cancelled one on the simulated model.
	scriptTimeout = 5 * time.Minute
)

// TestTypeScriptTypesCurrent fails when the TypeScript client's generated
// types differ from what docs/openapi.json says: run make generate.
func TestTypeScriptTypesCurrent(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := tsgen.Generate(doc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(tsDir, "src", "openapi.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s/src/openapi.ts is not what docs/openapi.json generates: run make generate (go generate ./clients/) and commit it", tsDir)
	}
	// Every component schema is a type the client can name.
	var d struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	for name := range d.Components.Schemas {
		if !regexp.MustCompile(`(?m)^export (interface|type) ` + name + `\b`).Match(got) {
			t.Errorf("openapi.ts has no type %s", name)
		}
	}
}

// need skips (or, with the variable require set to 1, fails) with why.
func need(t *testing.T, require, why string) {
	t.Helper()
	if os.Getenv(require) == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// needNode returns node once the TypeScript package's dev dependencies
// are installed.
func needNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		need(t, "MAKER_REQUIRE_NODE", "node not found on PATH; the TypeScript client check needs Node >= 20 and npm ci --prefix clients/typescript")
	}
	for _, pkg := range []string{"typescript", "@types/node"} {
		if _, err := os.Stat(filepath.Join(tsDir, "node_modules", pkg, "package.json")); err != nil {
			need(t, "MAKER_REQUIRE_NODE", "clients/typescript/node_modules/"+pkg+" is missing: npm ci --prefix clients/typescript")
		}
	}
	return node
}

// needPython returns python3 when it is 3.9 or newer.
func needPython(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		need(t, "MAKER_REQUIRE_PYTHON", "python3 not found on PATH; the Python client check needs Python >= 3.9")
	}
	out, err := exec.Command(py, "-c", "import sys; print(sys.version.split()[0]); sys.exit(sys.version_info < (3, 9))").CombinedOutput()
	if err != nil {
		need(t, "MAKER_REQUIRE_PYTHON", fmt.Sprintf("python3 %s is older than 3.9 (%v)", bytes.TrimSpace(out), err))
	}
	t.Logf("python3 %s", bytes.TrimSpace(out))
	return py
}

// liveAPI is a fleet (a coordinator and a voter on the simulated model)
// with maker serve in front of it, run through cli.Main as main does.
type liveAPI struct {
	*fleettest.Env
	base string
	keys *apikey.Store
}

var listeningRE = regexp.MustCompile(`maker serve listening on (http://\S+)`)

func startAPI(t *testing.T, flags ...string) *liveAPI {
	t.Helper()
	env := fleettest.New(t)
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 1})
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 8})
	a := &liveAPI{Env: env, keys: apikey.New(env.Topo)}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb testkit.SyncBuffer
	code := make(chan int, 1)
	args := append([]string{"serve", "--nats", env.NATS.URL, "--redis", env.Redis().URL(), "--addr", "127.0.0.1:0",
		"--rate", "1000", "--burst", "1000"}, flags...)
	go func() {
		code <- cli.Main(ctx, args, &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		<-code
	})
	fleettest.Eventually(t, 30*time.Second, func() bool {
		select {
		case c := <-code:
			code <- c
			t.Fatalf("serve exited %d: %s", c, errb.String())
		default:
		}
		if m := listeningRE.FindStringSubmatch(errb.String()); m != nil {
			a.base = m[1]
		}
		return a.base != ""
	}, "serve never listened: %s", errb.String())
	return a
}

// key creates a tenant's key and waits until the server takes it.
func (a *liveAPI) key(t *testing.T, tenant string) (string, *httpapi.Client) {
	t.Helper()
	key, _, err := a.keys.Create(t.Context(), apikey.CreateOptions{Tenant: tenant, Name: tenant + "-clients"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := httpapi.New(a.base, key, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 30*time.Second, func() bool {
		_, err := c.Usage(t.Context())
		return err == nil
	}, "the server never took %s's key", tenant)
	return key, c
}

// webhookFixture is a Standard Webhooks delivery signed here (crypto/hmac),
// independently of the clients: now, and an hour old.
type webhookFixture struct {
	Secret       string `json:"secret"`
	ID           string `json:"id"`
	Timestamp    int64  `json:"timestamp"`
	Body         string `json:"body"`
	Signature    string `json:"signature"`
	OldTimestamp int64  `json:"old_timestamp"`
	OldSignature string `json:"old_signature"`
}

func newWebhookFixture(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	sign := func(id string, ts int64, body string) string {
		m := hmac.New(sha256.New, key)
		fmt.Fprintf(m, "%s.%d.%s", id, ts, body)
		return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	now := time.Now().Unix()
	f := webhookFixture{
		Secret:       "whsec_" + base64.StdEncoding.EncodeToString(key),
		ID:           "msg_" + strconv.FormatInt(now, 36),
		Timestamp:    now,
		Body:         `{"type":"job.finished","data":{"tenant":"acme","job_id":"a1","state":"solved","steps":7}}`,
		OldTimestamp: now - 3600,
	}
	f.Signature = sign(f.ID, f.Timestamp, f.Body)
	f.OldSignature = sign(f.ID, f.OldTimestamp, f.Body)
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// receiver is a webhook receiver the real server delivers to: it answers
// 204 to every POST to /<lane> and writes each delivery, its headers and
// raw body, to <dir>/<lane>/<n>.json (through a rename, so a reader sees
// whole files only), where that lane's script reads it back.
type receiver struct {
	*httptest.Server
	dir string

	mu  sync.Mutex
	got map[string][]recorded // by lane
}

// recorded is one delivery as received.
type recorded struct {
	Headers map[string][]string `json:"headers"` // lower-case names
	Body    []byte              `json:"body"`    // base64 in the file
}

var laneRE = regexp.MustCompile(`^/([a-z]{1,16})$`)

func startReceiver(t *testing.T, lanes ...string) *receiver {
	t.Helper()
	rc := &receiver{dir: t.TempDir(), got: map[string][]recorded{}}
	for _, l := range lanes {
		if err := os.Mkdir(filepath.Join(rc.dir, l), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := laneRE.FindStringSubmatch(r.URL.Path)
		if r.Method != http.MethodPost || m == nil || !slices.Contains(lanes, m[1]) {
			http.Error(w, "no such webhook", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		d := recorded{Headers: map[string][]string{}, Body: body}
		for k, v := range r.Header {
			d.Headers[strings.ToLower(k)] = v
		}
		b, err := json.Marshal(d)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		n := len(rc.got[m[1]])
		file := filepath.Join(rc.dir, m[1], strconv.Itoa(n)+".json")
		if err := os.WriteFile(file+".tmp", b, 0o644); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		rc.got[m[1]] = append(rc.got[m[1]], d)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// deliveries returns what lane received.
func (rc *receiver) deliveries(lane string) []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]recorded(nil), rc.got[lane]...)
}

// seen is what a language's live script prints last.
type seen struct {
	OK     bool `json:"ok"`
	Report struct {
		JobID  string `json:"job_id"`
		Tenant string `json:"tenant"`
		Solved bool   `json:"solved"`
		Steps  int64  `json:"steps"`
	} `json:"report"`
	StatusEvents   int      `json:"status_events"`
	Listed         []string `json:"listed"`
	InvalidPath    string   `json:"invalid_path"`
	CancelledState string   `json:"cancelled_state"`
	Batch          struct {
		ID     string              `json:"id"`
		State  string              `json:"state"`
		Counts schemas.BatchCounts `json:"counts"`
		Output []string            `json:"output"`
	} `json:"batch"`
	Unauthorized int    `json:"unauthorized"`
	Webhook      string `json:"webhook"`
	// Delivered are the real deliveries the script verified with the
	// secret it fetched (getWebhookSecret), as the deliveries list shows
	// them, by id.
	Delivered map[string]struct {
		Type    string `json:"type"`
		JobID   string `json:"job_id"`
		BatchID string `json:"batch_id"`
		State   string `json:"state"`
	} `json:"delivered"`
}

// run runs a language's live script and reads its last line.
func run(t *testing.T, dir string, env []string, name string, args ...string) seen {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("%s %s: %s\n%s", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	var s seen
	if err := json.Unmarshal(lines[len(lines)-1], &s); err != nil || !s.OK {
		t.Fatalf("%s's last line: %v\n%s", strings.Join(args, " "), err, out)
	}
	return s
}

// check compares what a script saw with the fleet's own records, read
// through the Go client.
func check(t *testing.T, c *httpapi.Client, tenant, prefix string, s seen) {
	t.Helper()
	if s.Report.JobID != prefix+"-hanoi" || s.Report.Tenant != tenant || !s.Report.Solved || s.Report.Steps != 7 {
		t.Errorf("report %+v, want %s-hanoi of %s solved in 7 steps", s.Report, prefix, tenant)
	}
	if s.StatusEvents < 1 {
		t.Errorf("no status event before the report")
	}
	if want := []string{prefix + "-hanoi", prefix + "-second"}; strings.Join(s.Listed, " ") != strings.Join(want, " ") {
		t.Errorf("listed solved jobs %v, want %v", s.Listed, want)
	}
	if s.InvalidPath != "/params/disks" || s.Unauthorized != 401 || s.Webhook != "ok" || s.CancelledState != "cancelled" {
		t.Errorf("saw %+v", s)
	}
	ctx := t.Context()
	if v, err := c.Job(ctx, prefix+"-hanoi"); err != nil || v.State != "solved" {
		t.Errorf("the fleet's %s-hanoi: %+v %v", prefix, v, err)
	}
	if v, err := c.Job(ctx, prefix+"-long"); err != nil || v.State != "cancelled" {
		t.Errorf("the fleet's %s-long: %+v %v", prefix, v, err)
	}
	b, err := c.Batch(ctx, s.Batch.ID)
	if err != nil || b.State != schemas.BatchCompleted || b.Counts != s.Batch.Counts || b.Counts.Completed != 2 || b.Counts.Failed != 1 {
		t.Errorf("the fleet's batch %s: %+v %v; the script saw %+v", s.Batch.ID, b, err, s.Batch)
	}
	if got := strings.Join(s.Batch.Output, " "); got != "first broken third" {
		t.Errorf("batch output custom_ids %q, want input order", got)
	}
}

// getJSON reads path with key into v (the routes the Go client has no
// call for).
func getJSON(t *testing.T, base, key, path string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %s", path, res.StatusCode, err, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

// checkDeliveries checks the deliveries the receiver got for a script's
// job (prefix-hook) and batch: signed with the tenant's secret (checked
// here with crypto/hmac, apart from the clients), the events the script
// saw, and delivered in one attempt as GET /v1/webhooks/deliveries says.
func checkDeliveries(t *testing.T, base, key, tenant, prefix string, s seen, got []recorded) {
	t.Helper()
	var sec schemas.WebhookSecret
	getJSON(t, base, key, "/v1/webhooks/secret", &sec)
	mac, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec.Secret, "whsec_"))
	if sec.Tenant != tenant || !strings.HasPrefix(sec.Secret, "whsec_") || err != nil || len(mac) == 0 {
		t.Fatalf("%s's webhook secret: %+v %v", tenant, sec, err)
	}
	if len(got) != 2 {
		t.Fatalf("the receiver got %d deliveries for %s, want 2 (its job's and its batch's)", len(got), prefix)
	}
	events := map[string]schemas.WebhookEvent{}
	for _, d := range got {
		h := func(name string) string { return strings.Join(d.Headers[name], " ") }
		m := hmac.New(sha256.New, mac)
		fmt.Fprintf(m, "%s.%s.", h("webhook-id"), h("webhook-timestamp"))
		m.Write(d.Body)
		if want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)); h("webhook-signature") != want {
			t.Errorf("delivery %s: webhook-signature %q, want %q", h("webhook-id"), h("webhook-signature"), want)
		}
		var ev schemas.WebhookEvent
		if err := json.Unmarshal(d.Body, &ev); err != nil {
			t.Fatalf("delivery %s: %v: %s", h("webhook-id"), err, d.Body)
		}
		events[h("webhook-id")] = ev
	}
	var list schemas.WebhookDeliveryList
	getJSON(t, base, key, "/v1/webhooks/deliveries", &list)
	listed := map[string]schemas.WebhookDelivery{}
	for _, d := range list.Deliveries {
		listed[d.ID] = d
	}
	if len(s.Delivered) != len(events) {
		t.Errorf("the script verified %d deliveries, the receiver got %d", len(s.Delivered), len(events))
	}
	var jobs, batches int
	for id, ev := range events {
		sd, l := s.Delivered[id], listed[id]
		switch {
		case ev.Type == schemas.WebhookJobFinished && ev.Data.JobID == prefix+"-hook" && ev.Data.State == schemas.StateSolved &&
			ev.Data.Report != nil && ev.Data.Report.Steps == 3:
			jobs++
		case ev.Type == schemas.WebhookBatchFinished && ev.Data.BatchID == s.Batch.ID && ev.Data.State == schemas.BatchCompleted &&
			ev.Data.Counts != nil && *ev.Data.Counts == s.Batch.Counts:
			batches++
		default:
			t.Errorf("delivery %s: an event %+v, want %s-hook's or batch %s's end", id, ev, prefix, s.Batch.ID)
		}
		if ev.Data.Tenant != tenant || sd.Type != ev.Type || sd.JobID != ev.Data.JobID || sd.BatchID != ev.Data.BatchID ||
			sd.State != schemas.WebhookDelivered {
			t.Errorf("delivery %s: %+v; the script saw %+v", id, ev, sd)
		}
		if l.State != schemas.WebhookDelivered || len(l.Attempts) != 1 || l.Attempts[0].StatusCode != http.StatusNoContent ||
			l.Tenant != tenant || l.Type != ev.Type {
			t.Errorf("delivery %s listed as %+v, want delivered in one attempt answered 204", id, l)
		}
	}
	if jobs != 1 || batches != 1 {
		t.Errorf("%d job.finished and %d batch.finished deliveries, want one each", jobs, batches)
	}
}

// TestClients runs the TypeScript and the Python client against maker
// serve in front of a real fleet (an in-process nats-server, a
// redis-server, a coordinator and a voter on the simulated model), each
// with its own tenant: jobs followed by their event streams, paging,
// problems (404, 400, 422, 409, 401), pause, resume and cancel, budgets,
// a batch with an invalid line, tasks, usage, dead letters, Retry-After,
// webhook deliveries signed here, and real ones: the server delivers a
// job's and a batch's end to a receiver here (allowed on 127.0.0.1), and
// each script verifies what it received with the secret it fetched and
// sees the deliveries listed as delivered.
func TestClients(t *testing.T) {
	t.Parallel()
	a := startAPI(t, "--webhook-allow", "127.0.0.1/32")
	rc := startReceiver(t, "ts", "py")
	fixture := newWebhookFixture(t)
	liveEnv := func(key, prefix string) []string {
		return []string{"MAKER_API_URL=" + a.base, "MAKER_API_KEY=" + key, "MAKER_JOB_PREFIX=" + prefix, "MAKER_WEBHOOK_FIXTURE=" + fixture,
			"MAKER_WEBHOOK_URL=" + rc.URL + "/" + prefix, "MAKER_WEBHOOK_DIR=" + filepath.Join(rc.dir, prefix)}
	}

	t.Run("typescript", func(t *testing.T) {
		t.Parallel()
		node := needNode(t)
		key, c := a.key(t, "ts-tenant")
		// The package's own build, then the test's (src and test/ to dist-test/).
		for _, cfg := range []string{"tsconfig.json", "tsconfig.test.json"} {
			cmd := exec.CommandContext(t.Context(), node, "node_modules/typescript/bin/tsc", "-p", cfg)
			cmd.Dir = tsDir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("tsc -p %s: %v\n%s", cfg, err, out)
			}
		}
		s := run(t, tsDir, liveEnv(key, "ts"), node, "dist-test/test/live.js")
		check(t, c, "ts-tenant", "ts", s)
		checkDeliveries(t, a.base, key, "ts-tenant", "ts", s, rc.deliveries("ts"))
	})

	t.Run("python", func(t *testing.T) {
		t.Parallel()
		py := needPython(t)
		key, c := a.key(t, "py-tenant")
		abs, err := filepath.Abs(pyDir)
		if err != nil {
			t.Fatal(err)
		}
		s := run(t, pyDir, append(liveEnv(key, "py"), "PYTHONPATH="+abs, "PYTHONDONTWRITEBYTECODE=1"), py, "tests/live_test.py")
		check(t, c, "py-tenant", "py", s)
		checkDeliveries(t, a.base, key, "py-tenant", "py", s, rc.deliveries("py"))
	})
}
