package calibrate_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/calibrate"
	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// validKey is the KV key rule of nats.go: these characters, no empty
// token (no leading, trailing or double dot).
var validKey = regexp.MustCompile(`^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*$`)

func TestKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("m", 300)
	tests := []struct {
		task, model, version string
		want                 string // "" only checks the rules
	}{
		{"hanoi", "sim-1", "3f2a9c41d07e", "hanoi.sim-1.3f2a9c41d07e"},
		{"hanoi", "gpt-4.1-mini", "abc", ""},
		{"hanoi", "openai/gpt-4o", "abc", ""},
		{"hanoi", "my model", "abc", ""},
		{"hanoi", "llama3:8b@q4", "abc", ""},
		{"hanoi", long, "abc", ""},
		{"hanoi", "..", "abc", ""},
		{"hanoi", ".", "abc", ""},
		{"hanoi", "", "", ""},
		{"hanoi", "*", ">", ""},
		{"hanoi", "модель", "abc", ""},
		{"hanoi", "a=b", "abc", ""},
		{"ledger", "m", "sha256:00ff", ""},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		k := calibrate.Key(tt.task, tt.model, tt.version)
		if tt.want != "" && k != tt.want {
			t.Errorf("Key(%q, %q, %q) = %q, want %q", tt.task, tt.model, tt.version, k, tt.want)
		}
		if !validKey.MatchString(k) || strings.Count(k, ".") != 2 || len(k) > 200 {
			t.Errorf("Key(%q, %q, %q) = %q: not three valid KV tokens", tt.task, clip(tt.model), tt.version, k)
		}
		name := tt.task + "\x00" + tt.model + "\x00" + tt.version
		if other, dup := seen[k]; dup && other != name {
			t.Errorf("%q and %q share key %q", other, name, k)
		}
		seen[k] = name
	}
	// A plain name and the hashed form of another never meet: '=' marks
	// the hashed.
	if a, b := calibrate.Key("t", "gpt-4_1", "v"), calibrate.Key("t", "gpt-4.1", "v"); a == b || !strings.Contains(b, "=") || strings.Contains(a, "=") {
		t.Errorf("gpt-4_1 → %q, gpt-4.1 → %q", a, b)
	}
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// FuzzKey: every name gives a valid key of three tokens, the same each
// time, and a plain name is kept as it is.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"sim-1", "gpt-4.1-mini", "openai/gpt-4o", "a b", "", ".", "..", "=", strings.Repeat("x", 300), "\xff\xfe"} {
		f.Add("hanoi", s, "3f2a9c41d07e")
	}
	f.Fuzz(func(t *testing.T, tk, model, version string) {
		k := calibrate.Key(tk, model, version)
		if !validKey.MatchString(k) || strings.Count(k, ".") != 2 || len(k) > 3*65 {
			t.Fatalf("Key(%q, %q, %q) = %q", tk, model, version, k)
		}
		if k != calibrate.Key(tk, model, version) {
			t.Fatal("not deterministic")
		}
		if regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`).MatchString(model) && strings.Split(k, ".")[1] != model {
			t.Fatalf("plain model %q became %q", model, k)
		}
	})
}

func record(model string, p float64) schemas.Calibration {
	iv, _ := plan.ClopperPearson(int64(p*1000), 1000, 0.95)
	return schemas.Calibration{
		Header: schemas.NewHeader(schemas.KindCalibration), Task: "hanoi", Model: model, PromptVersion: "3f2a9c41d07e",
		Temperature: 0.1, MaxOutputTokens: 750, Samples: 1000, Valid: 1000, Right: int64(p * 1000),
		P: p, PLow: iv.Low, PHigh: iv.High, ValidFraction: 1, ValidLow: 0.996, ValidHigh: 1,
		PromptTokensMean: 600, CompletionTokensMean: 200, TokensPerCall: 800,
		Confidence: 0.95, Method: schemas.CalibrationClopperPearson, Seed: 1, MeasuredAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
	}
}

// TestStoreRoundTrip on a real nats-server: a missing bucket is
// ErrNotFound; records of hostile model names are stored, found, listed
// and replaced; a record under another's key is not taken for it.
func TestStoreRoundTrip(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	ns := bus.Namespace("caltest")
	if _, err := calibrate.OpenBucket(ctx, js, ns, false); !errors.Is(err, calibrate.ErrNotFound) {
		t.Fatalf("no bucket yet: %v, want ErrNotFound", err)
	}
	if _, err := calibrate.Lookup(ctx, nil, "hanoi", "m", "v"); !errors.Is(err, calibrate.ErrNotFound) {
		t.Fatalf("nil bucket: %v", err)
	}
	kv, err := calibrate.OpenBucket(ctx, js, ns, true)
	if err != nil {
		t.Fatal(err)
	}
	if kv.Bucket() != "caltest_calibrations" {
		t.Errorf("bucket %q", kv.Bucket())
	}
	models := []string{"sim-1", "gpt-4.1-mini", "openai/gpt-4o", "my model", strings.Repeat("m", 300), "a.b.c"}
	for i, m := range models {
		if err := calibrate.Put(ctx, kv, record(m, 0.9+float64(i)/100)); err != nil {
			t.Fatalf("put %q: %v", clip(m), err)
		}
	}
	for i, m := range models {
		c, err := calibrate.Lookup(ctx, kv, "hanoi", m, "3f2a9c41d07e")
		if err != nil || c.Model != m || c.P != 0.9+float64(i)/100 {
			t.Errorf("lookup %q: %v, %v", clip(m), c.P, err)
		}
	}
	if _, err := calibrate.Lookup(ctx, kv, "hanoi", "sim-1", "another"); !errors.Is(err, calibrate.ErrNotFound) {
		t.Errorf("another prompt version: %v", err)
	}
	// Replaced: the newest is found.
	if err := calibrate.Put(ctx, kv, record("sim-1", 0.5)); err != nil {
		t.Fatal(err)
	}
	if c, err := calibrate.Lookup(ctx, kv, "hanoi", "sim-1", "3f2a9c41d07e"); err != nil || c.P != 0.5 {
		t.Errorf("replaced: %v, %v", c.P, err)
	}
	// A record under a key that is not its own is no answer.
	stray := record("other", 0.7)
	data, _ := schemas.Encode(&stray)
	if _, err := kv.Put(ctx, calibrate.Key("hanoi", "victim", "3f2a9c41d07e"), data); err != nil {
		t.Fatal(err)
	}
	if _, err := calibrate.Lookup(ctx, kv, "hanoi", "victim", "3f2a9c41d07e"); !errors.Is(err, calibrate.ErrNotFound) {
		t.Errorf("stray record: %v, want ErrNotFound", err)
	}
	// An unreadable record is named; the rest are listed.
	if _, err := kv.Put(ctx, "hanoi.broken.v", []byte("{")); err != nil {
		t.Fatal(err)
	}
	list, err := calibrate.List(ctx, kv)
	if err == nil || !strings.Contains(err.Error(), "hanoi.broken.v") || len(list) != len(models)+1 {
		t.Errorf("list: %d records, %v", len(list), err)
	}
	// An invalid record is not stored.
	bad := record("x", 0.9)
	bad.Right = 2000
	if err := calibrate.Put(ctx, kv, bad); !errors.Is(err, schemas.ErrInvalid) {
		t.Errorf("invalid record: %v", err)
	}
	// Opened again, it is the same bucket.
	if again, err := calibrate.OpenBucket(ctx, js, ns, false); err != nil || again.Bucket() != kv.Bucket() {
		t.Errorf("open again: %v", err)
	}
}

// TestStoreAuthorization on a nats-server with `maker auth init`'s
// permissions: only the admin writes calibrations (as the retention
// policies); the api and the approver read them; the coordinator
// (which reads every bucket) does not write them either.
func TestStoreAuthorization(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := authtest.Start(t)
	open := func(ctx context.Context, t *testing.T, id string, create bool) (jetstream.KeyValue, *authtest.Conn, error) {
		c := srv.Connect(t, id)
		js, err := jetstream.New(c.Conn)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := calibrate.OpenBucket(ctx, js, bus.DefaultNamespace, create)
		return kv, c, err
	}
	kv, _, err := open(ctx, t, auth.Admin, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := calibrate.Put(ctx, kv, record("sim-1", 0.99)); err != nil {
		t.Fatalf("admin writes: %v", err)
	}
	// In a group, so ctx outlives the parallel cases.
	t.Run("readers", func(t *testing.T) {
		for _, id := range []string{auth.API, auth.Approver, auth.Coordinator} {
			t.Run(id, func(t *testing.T) {
				t.Parallel()
				kv, c, err := open(ctx, t, id, false)
				if err != nil {
					t.Fatalf("%s opens the bucket: %v (violations %v)", id, err, c.Violations())
				}
				got, err := calibrate.Lookup(ctx, kv, "hanoi", "sim-1", "3f2a9c41d07e")
				if err != nil || got.P != 0.99 {
					t.Errorf("%s reads: %v, %v (violations %v)", id, got.P, err, c.Violations())
				}
				if _, err := calibrate.List(ctx, kv); err != nil {
					t.Errorf("%s lists: %v", id, err)
				}
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				err = calibrate.Put(pctx, kv, record("sim-1", 0.6))
				pcancel()
				if err == nil {
					t.Errorf("%s wrote a calibration", id)
				}
				if v := c.WaitViolation("$KV."+bus.DefaultNamespace.CalibrationsBucket(), 5*time.Second); v == nil {
					t.Errorf("%s: no permission violation reported for its write", id)
				}
			})
		}
	})
	if got, err := calibrate.Lookup(ctx, kv, "hanoi", "sim-1", "3f2a9c41d07e"); err != nil || got.P != 0.99 {
		t.Errorf("after the refused writes: %v, %v", got.P, err)
	}
	// A voter has no business with calibrations.
	vctx, vcancel := context.WithTimeout(ctx, 2*time.Second)
	defer vcancel()
	if _, c, err := open(vctx, t, auth.Voter, false); err == nil {
		t.Errorf("voter opened the bucket (violations %v)", c.Violations())
	}
}
