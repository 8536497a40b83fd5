package apikey_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a log sink safe for the watch goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is a fleet's topology on a real nats-server, and a way to open it
// again on another connection: another process.
type env struct {
	url  string
	topo *topology.Topology
	log  *syncBuffer
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := testkit.StartNATS(t)
	e := &env{url: srv.URL, log: &syncBuffer{}}
	e.topo = e.open(t, true)
	return e
}

// open connects anew and binds the topology (create: makes it).
func (e *env) open(t *testing.T, create bool) *topology.Topology {
	t.Helper()
	_, js := testkit.Connect(t, e.url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := topology.Config{Storage: jetstream.MemoryStorage, Logger: slog.New(slog.NewTextHandler(e.log, nil))}
	open := topology.Open
	if create {
		open = topology.Ensure
	}
	topo, err := open(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// started returns a Store on topo with its cache running until the test
// ends.
func started(t *testing.T, topo *topology.Topology) *apikey.Store {
	t.Helper()
	s := apikey.New(topo)
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Stop() })
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond (a watch delivering) until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, cond, "%s", what)
}

// TestAuthenticateRefusesMalformed: anything that is not a key's shape is
// ErrUnauthorized, before any lookup, cached or not, and so is a
// well-formed key nobody made.
func TestAuthenticateRefusesMalformed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	cached, direct := started(t, e.topo), apikey.New(e.topo)
	good, _, err := direct.Create(ctx, apikey.CreateOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	id, secret := good[3:15], good[16:]
	for _, tc := range []struct{ name, key string }{
		{"empty", ""},
		{"prefix only", "mk_"},
		{"key id only", "mk_" + id},
		{"no secret", "mk_" + id + "_"},
		{"other prefix", "mx_" + id + "_" + secret},
		{"upper-case id", "mk_ABCDEF012345_" + secret},
		{"short id", "mk_" + id[:11] + "_" + secret + "A"},
		{"no separator", "mk_" + id + "-" + secret},
		{"short secret", good[:len(good)-1]},
		{"long secret", good + "A"},
		{"padded secret", good[:len(good)-1] + "="},
		{"standard base64", good[:len(good)-1] + "+"},
		{"trailing newline", good[:len(good)-1] + "\n"},
		{"with the scheme", "Bearer " + good},
		{"spaces", " " + good[1:]},
		{"unicode", "mk_" + id + "_" + secret[:len(secret)-2] + "é"},
		{"unknown well-formed", "mk_" + id + "_" + strings.Repeat("A", len(secret)-1) + "A"},
		{"another id, same secret", "mk_000000000000_" + secret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, s := range map[string]*apikey.Store{"cached": cached, "direct": direct} {
				if p, err := s.Authenticate(ctx, tc.key); !errors.Is(err, apikey.ErrUnauthorized) || err.Error() != apikey.ErrUnauthorized.Error() || p != (apikey.Principal{}) {
					t.Errorf("%s: Authenticate(%q) = %+v, %v; want ErrUnauthorized and nothing more", name, tc.key, p, err)
				}
			}
		})
	}
	eventually(t, "the cache holds the good key", func() bool { _, err := cached.Authenticate(ctx, good); return err == nil })
}

// TestCreate: a key is mk_<12 hex>_<43 base64url>, shown once; the bucket
// holds its record under its SHA-256 and never the key or its secret; both
// a cached and an uncached store know it at once; ids differ.
func TestCreate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	s := started(t, e.topo)
	uncached := apikey.New(e.topo)
	opts := []apikey.CreateOptions{
		{Tenant: "acme", Name: "acme's batch runner", RatePerSec: 20, Burst: 40},
		{Tenant: "acme"},
		{Tenant: "globex", Admin: true, Name: "ops"},
		{Tenant: "acme", Approver: true, Name: "alice"},
	}
	seen := map[string]bool{}
	var made []string
	for _, o := range opts {
		key, rec, err := s.Create(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, key)
		if len(key) != apikey.KeyLen || !strings.HasPrefix(key, rec.Prefix+"_") || rec.Prefix != "mk_"+rec.KeyID {
			t.Errorf("key %q (len %d) does not match its record %+v", key, len(key), rec)
		}
		if seen[rec.KeyID] {
			t.Errorf("key id %s twice", rec.KeyID)
		}
		seen[rec.KeyID] = true
		if rec.Tenant != o.Tenant || rec.Admin != o.Admin || rec.Approver != o.Approver || rec.Name != o.Name || rec.RatePerSec != o.RatePerSec ||
			rec.Burst != o.Burst || rec.CreatedAt.IsZero() || rec.Revoked() {
			t.Errorf("record %+v, options %+v", rec, o)
		}
		entry, err := e.topo.APIKeys.Get(ctx, apikey.Hash(key))
		if err != nil {
			t.Fatalf("not filed under the key's hash: %v", err)
		}
		var stored schemas.APIKey
		if err := schemas.Decode(entry.Value(), &stored); err != nil || stored.KeyID != rec.KeyID {
			t.Errorf("stored %s: %v", entry.Value(), err)
		}
		want := apikey.Principal{KeyID: rec.KeyID, Tenant: o.Tenant, Admin: o.Admin, Approver: o.Approver, Name: o.Name,
			RatePerSec: o.RatePerSec, Burst: o.Burst}
		for name, st := range map[string]*apikey.Store{"cached": s, "uncached": uncached} {
			if p, err := st.Authenticate(ctx, key); err != nil || p != want {
				t.Errorf("%s: Authenticate = %+v, %v; want %+v", name, p, err, want)
			}
		}
	}
	// Nothing in the bucket or the logs holds a key or its secret.
	w, err := e.topo.APIKeys.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var all bytes.Buffer
	for en := range w.Updates() {
		if en == nil {
			break
		}
		all.WriteString(en.Key() + " " + string(en.Value()) + "\n")
	}
	for _, key := range made {
		if secret := key[16:]; strings.Contains(all.String(), secret) || strings.Contains(e.log.String(), secret) {
			t.Errorf("a secret is stored or logged:\n%s\n%s", all.String(), e.log.String())
		}
	}
}

// TestCreateRefused: options a key cannot have write nothing.
func TestCreateRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	s := apikey.New(e.topo)
	for _, tc := range []struct {
		name string
		o    apikey.CreateOptions
		want string
	}{
		{"no tenant", apikey.CreateOptions{}, "tenant"},
		{"bad tenant", apikey.CreateOptions{Tenant: "Acme Corp"}, "tenant"},
		{"negative rate", apikey.CreateOptions{Tenant: "acme", RatePerSec: -1}, "rate_per_sec"},
		{"negative burst", apikey.CreateOptions{Tenant: "acme", Burst: -1}, "burst"},
		{"long name", apikey.CreateOptions{Tenant: "acme", Name: strings.Repeat("n", 65)}, "name"},
		{"control character", apikey.CreateOptions{Tenant: "acme", Name: "a\nb"}, "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, _, err := s.Create(ctx, tc.o)
			if !errors.Is(err, apikey.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || key != "" {
				t.Errorf("Create = %q, %v; want ErrInvalid naming %s", key, err, tc.want)
			}
		})
	}
	if keys, err := s.List(ctx, ""); err != nil || len(keys) != 0 {
		t.Errorf("List = %v, %v; want nothing written", keys, err)
	}
}

// TestList: a tenant's keys or everyone's, oldest first, revoked ones too.
func TestList(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	s := apikey.New(e.topo)
	var ids []string
	for _, tenant := range []string{"acme", "globex", "acme"} {
		_, rec, err := s.Create(ctx, apikey.CreateOptions{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.KeyID)
		time.Sleep(2 * time.Millisecond) // distinct created_at, for the order
	}
	if _, err := s.Revoke(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant string
		want   []string
	}{
		{"", ids},
		{"acme", []string{ids[0], ids[2]}},
		{"globex", ids[1:2]},
		{"initech", nil},
	} {
		got, err := s.List(ctx, tc.tenant)
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for _, k := range got {
			gotIDs = append(gotIDs, k.KeyID)
			if k.Revoked() != (k.KeyID == ids[0]) {
				t.Errorf("%s revoked %v", k.KeyID, k.RevokedAt)
			}
		}
		if strings.Join(gotIDs, ",") != strings.Join(tc.want, ",") {
			t.Errorf("List(%q) = %v, want %v", tc.tenant, gotIDs, tc.want)
		}
	}
}

// TestRevoke: by key id, prefix or the whole key; the key is refused at
// once by this process and, as its watch delivers, by another; a revoke is
// idempotent; unknown and malformed references are refused without
// showing a secret.
func TestRevoke(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	admin := apikey.New(e.open(t, false)) // maker keys, another process
	local := started(t, e.topo)           // maker serve
	other := started(t, e.open(t, false)) // another maker serve
	for _, by := range []string{"key id", "prefix", "key"} {
		t.Run(by, func(t *testing.T) {
			key, rec, err := admin.Create(ctx, apikey.CreateOptions{Tenant: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, "both caches see the key", func() bool {
				_, err1 := local.Authenticate(ctx, key)
				_, err2 := other.Authenticate(ctx, key)
				return err1 == nil && err2 == nil
			})
			ref := map[string]string{"key id": rec.KeyID, "prefix": rec.Prefix, "key": key}[by]
			revoker := map[string]*apikey.Store{"key id": admin, "prefix": local, "key": other}[by]
			got, err := revoker.Revoke(ctx, ref)
			if err != nil || !got.Revoked() || got.KeyID != rec.KeyID {
				t.Fatalf("Revoke(%s) = %+v, %v", by, got, err)
			}
			if _, err := revoker.Authenticate(ctx, key); !errors.Is(err, apikey.ErrUnauthorized) {
				t.Errorf("the revoking store still takes the key: %v", err)
			}
			start := time.Now()
			for name, s := range map[string]*apikey.Store{"local": local, "other": other, "uncached": apikey.New(e.topo)} {
				eventually(t, name+" refuses the revoked key", func() bool {
					_, err := s.Authenticate(ctx, key)
					return errors.Is(err, apikey.ErrUnauthorized)
				})
			}
			t.Logf("revoke by %s applied everywhere after %v", by, time.Since(start))
			again, err := admin.Revoke(ctx, rec.KeyID)
			if err != nil || !again.RevokedAt.Equal(*got.RevokedAt) {
				t.Errorf("second revoke = %+v, %v; want the first revoke's time", again, err)
			}
		})
	}
	secret := strings.Repeat("Q", 42) + "A" // well-formed: 32 bytes
	for _, tc := range []struct {
		name, ref string
		want      error
	}{
		{"unknown id", "0123456789ab", apikey.ErrNotFound},
		{"unknown prefix", "mk_0123456789ab", apikey.ErrNotFound},
		{"unknown key", "mk_0123456789ab_" + secret, apikey.ErrNotFound},
		{"empty", "", apikey.ErrInvalid},
		{"upper-case id", "0123456789AB", apikey.ErrInvalid},
		{"mangled key", "mk_0123456789ab_" + secret + "=", apikey.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := admin.Revoke(ctx, tc.ref)
			if !errors.Is(err, tc.want) || strings.Contains(err.Error(), secret) {
				t.Errorf("Revoke(%q) = %v, want %v without the secret", tc.ref, err, tc.want)
			}
		})
	}
}

// TestCacheFollowsTheBucket: a record deleted or overwritten with garbage
// by hand authenticates nobody, and an unreadable record is logged by its
// hash, never a key.
func TestCacheFollowsTheBucket(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	s := started(t, e.topo)
	uncached := apikey.New(e.topo)
	for _, tc := range []struct {
		name  string
		spoil func(hash string) error
	}{
		{"deleted", func(h string) error { return e.topo.APIKeys.Delete(ctx, h) }},
		{"purged", func(h string) error { return e.topo.APIKeys.Purge(ctx, h) }},
		{"garbage", func(h string) error { _, err := e.topo.APIKeys.Put(ctx, h, []byte(`{"kind":"api_key"`)); return err }},
		{"another key's record", func(h string) error {
			_, rec, err := s.Create(ctx, apikey.CreateOptions{Tenant: "globex", Admin: true})
			if err != nil {
				return err
			}
			_, err = e.topo.APIKeys.Put(ctx, h, mustEncode(t, &rec))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, _, err := s.Create(ctx, apikey.CreateOptions{Tenant: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Authenticate(ctx, key); err != nil {
				t.Fatal(err)
			}
			if err := tc.spoil(apikey.Hash(key)); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the cache drops the key", func() bool {
				_, err := s.Authenticate(ctx, key)
				return errors.Is(err, apikey.ErrUnauthorized)
			})
			if _, err := uncached.Authenticate(ctx, key); !errors.Is(err, apikey.ErrUnauthorized) {
				t.Errorf("uncached: %v", err)
			}
			if strings.Contains(e.log.String(), key[16:]) {
				t.Errorf("a secret is logged:\n%s", e.log.String())
			}
		})
	}
	if !strings.Contains(e.log.String(), "unreadable key record") {
		t.Errorf("the garbage record is not logged:\n%s", e.log.String())
	}
}

func mustEncode(t *testing.T, m schemas.Message) []byte {
	t.Helper()
	b, err := schemas.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAuthenticateConcurrent: many requests authenticate while keys are
// made and revoked (run with -race); a revoked key is never taken after
// its revoke returned.
func TestAuthenticateConcurrent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	s := started(t, e.topo)
	const n = 8
	keys := make([]string, n)
	for i := range keys {
		var err error
		if keys[i], _, err = s.Create(ctx, apikey.CreateOptions{Tenant: "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	var revoked [n]chan struct{}
	for i := range revoked {
		revoked[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for w := range 4 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := w % n
			for range 200 {
				select {
				case <-revoked[i]:
					if _, err := s.Authenticate(ctx, keys[i]); !errors.Is(err, apikey.ErrUnauthorized) {
						errs <- err
					}
					return
				default:
					_, _ = s.Authenticate(ctx, keys[i])
				}
			}
		}()
	}
	for i := range keys {
		if _, err := s.Revoke(ctx, keys[i]); err != nil {
			t.Fatal(err)
		}
		close(revoked[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a revoked key was taken: %v", err)
	}
}

// TestStartStop: Start twice is refused; Stop without Start and twice are
// harmless; a store on a topology without the bucket says so.
func TestStartStop(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	s := apikey.New(e.topo)
	s.Stop()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err == nil {
		t.Error("Start twice: no error")
	}
	s.Stop()
	s.Stop()
	none := apikey.New(&topology.Topology{})
	if err := none.Start(ctx); !errors.Is(err, apikey.ErrNoBucket) {
		t.Errorf("Start without the bucket = %v", err)
	}
	if _, _, err := none.Create(ctx, apikey.CreateOptions{Tenant: "acme"}); !errors.Is(err, apikey.ErrNoBucket) {
		t.Errorf("Create without the bucket = %v", err)
	}
	// A well-formed key on a store without its bucket is not a 401: the
	// server cannot check it.
	key := "mk_0123456789ab_" + strings.Repeat("A", 43)
	if _, err := none.Authenticate(ctx, key); !errors.Is(err, apikey.ErrNoBucket) {
		t.Errorf("Authenticate without the bucket = %v", err)
	}
}

// BenchmarkAuthenticate: what checking a key costs a request, from the
// cache and from the bucket (one KV read).
func BenchmarkAuthenticate(b *testing.B) {
	_, topo := testkit.StartTopology(b)
	ctx := context.Background()
	cached := apikey.New(topo)
	if err := cached.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer cached.Stop()
	key, _, err := cached.Create(ctx, apikey.CreateOptions{Tenant: "acme"})
	if err != nil {
		b.Fatal(err)
	}
	for name, s := range map[string]*apikey.Store{"cached": cached, "bucket": apikey.New(topo)} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Authenticate(ctx, key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
