// Package apikey is the API keys of `maker serve`: created, listed and
// revoked by an admin (`maker keys`), and checked on every request.
//
// A key is mk_<key_id>_<secret>: key_id 12 hex digits and secret 32 bytes
// (base64url), both from crypto/rand. It is shown once, when created; the
// bucket maker_apikeys holds only its record (schemas.APIKey, kind
// api_key) under the SHA-256 of the whole key, so neither the bucket nor a
// log ever holds a key. A revoked key stays listed, with revoked_at.
//
// Authenticate answers from a cache that a watch of the bucket keeps (Start):
// no KV round trip per request, and a revoke written by any process reaches
// every serve process as fast as the watch delivers it (milliseconds). A
// key that is malformed, unknown or revoked is ErrUnauthorized, with no
// detail of which.
package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// Sentinel errors.
var (
	// ErrUnauthorized: the key is malformed, unknown or revoked. It never
	// says which.
	ErrUnauthorized = errors.New("apikey: unauthorized")
	// ErrNotFound: no key has the id, prefix or key given to Revoke.
	ErrNotFound = errors.New("apikey: no such key")
	// ErrInvalid: a reference that is neither a key id, a prefix nor a key,
	// or options a key cannot have.
	ErrInvalid = errors.New("apikey: invalid")
	// ErrNoBucket: the topology has no API key bucket.
	ErrNoBucket = errors.New("apikey: the fleet has no API key bucket (start a coordinator, or run maker topology create)")
)

// Principal is who a request acts for: its key's tenant and rights.
type Principal struct {
	// KeyID names the key (rate limits are kept per key).
	KeyID string
	// Tenant is the tenant the key acts for.
	Tenant string
	// Admin keys may use the fleet-wide views.
	Admin bool
	// Approver keys may answer the key's tenant's steps that wait for a
	// person.
	Approver bool
	// Name is the key's name ("" when it has none).
	Name string
	// RatePerSec and Burst are the key's own rate limit (0: the server's
	// defaults).
	RatePerSec float64
	Burst      int
}

// Person is who a decision made with the key is recorded as by: its name,
// or its prefix mk_<key id> when it has none.
func (p Principal) Person() string {
	if strings.TrimSpace(p.Name) != "" {
		return p.Name
	}
	return schemas.APIKeyPrefix + p.KeyID
}

// Key shape: mk_ + 12 hex + _ + 43 base64url characters (32 bytes).
const (
	keyIDBytes  = 6
	secretBytes = 32
	keyIDLen    = 2 * keyIDBytes
	prefixLen   = len(schemas.APIKeyPrefix) + keyIDLen
)

var secretLen = base64.RawURLEncoding.EncodedLen(secretBytes)

// KeyLen is the length of every key.
var KeyLen = prefixLen + 1 + secretLen

// CreateOptions are a new key's properties.
type CreateOptions struct {
	// Tenant the key acts for (required).
	Tenant string
	// Admin gives the key the fleet-wide views.
	Admin bool
	// Approver lets the key answer its tenant's steps that wait for a
	// person, as Name (the key's prefix when it has none).
	Approver bool
	// Name is a note for people (optional); for an approver key, the
	// person its decisions are recorded as by.
	Name string
	// RatePerSec and Burst are the key's rate limit (0: the server's
	// defaults).
	RatePerSec float64
	Burst      int
}

// entry is one cached record and the bucket revision it was read at.
type entry struct {
	rec schemas.APIKey
	rev uint64
}

// Store creates, lists, revokes and checks API keys in the topology's API
// key bucket. Its methods are safe for concurrent use. Start runs the watch
// that keeps the cache Authenticate reads; without it (or while it is not
// running) Authenticate reads the bucket on every call.
type Store struct {
	raw jetstream.KeyValue
	kv  *bus.KV[schemas.APIKey]
	log *slog.Logger
	now func() time.Time

	mu    sync.RWMutex
	cache map[string]entry // by the key's hash
	live  bool             // the watch has delivered the bucket and runs

	runMu  sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Store over topo's API key bucket.
func New(topo *topology.Topology) *Store {
	s := &Store{log: slog.Default(), now: time.Now, cache: map[string]entry{}}
	if topo != nil && topo.APIKeys != nil {
		s.raw = topo.APIKeys
		s.kv = bus.NewKV(topo.APIKeys, bus.MessageCodec[schemas.APIKey]())
		if topo.Config.Logger != nil {
			s.log = topo.Config.Logger
		}
	}
	return s
}

// Hash is what the bucket files a key under: the lower-case hex SHA-256 of
// the whole key.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// wellFormed reports whether key has the shape of a key: mk_, 12 lower-case
// hex digits, _, and 32 bytes in base64url without padding.
func wellFormed(key string) bool {
	if len(key) != KeyLen || !strings.HasPrefix(key, schemas.APIKeyPrefix) || key[prefixLen] != '_' {
		return false
	}
	if !isKeyID(key[len(schemas.APIKeyPrefix):prefixLen]) {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(key[prefixLen+1:])
	return err == nil && len(b) == secretBytes
}

func isKeyID(s string) bool {
	if len(s) != keyIDLen {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Authenticate returns the principal of key. A malformed, unknown or
// revoked key is ErrUnauthorized (the error says nothing more); any other
// error is the bucket's (only when the cache is not running). With the
// cache running it reads no KV: a key made by another process is usable
// once the watch delivers it.
func (s *Store) Authenticate(ctx context.Context, key string) (Principal, error) {
	if !wellFormed(key) {
		return Principal{}, ErrUnauthorized
	}
	h := Hash(key)
	s.mu.RLock()
	e, ok := s.cache[h]
	live := s.live
	s.mu.RUnlock()
	if !live {
		if s.kv == nil {
			return Principal{}, ErrNoBucket
		}
		rec, rev, err := s.kv.Get(ctx, h)
		switch {
		case errors.Is(err, bus.ErrNotFound), errors.Is(err, bus.ErrBadValue):
			return Principal{}, ErrUnauthorized
		case err != nil:
			return Principal{}, fmt.Errorf("apikey: authenticate: %w", err)
		}
		e, ok = entry{rec: *rec, rev: rev}, true
	}
	// The prefix check guards against a record filed under another key's
	// hash by hand.
	if !ok || e.rec.Revoked() || e.rec.Prefix != key[:prefixLen] {
		return Principal{}, ErrUnauthorized
	}
	return Principal{KeyID: e.rec.KeyID, Tenant: e.rec.Tenant, Admin: e.rec.Admin, Approver: e.rec.Approver, Name: e.rec.Name,
		RatePerSec: e.rec.RatePerSec, Burst: e.rec.Burst}, nil
}

// Create makes a key and returns it (the only time it is ever shown) with
// its record. Invalid options are ErrInvalid.
func (s *Store) Create(ctx context.Context, o CreateOptions) (string, schemas.APIKey, error) {
	if s.kv == nil {
		return "", schemas.APIKey{}, ErrNoBucket
	}
	rec := schemas.APIKey{
		Header: schemas.NewHeader(schemas.KindAPIKey),
		KeyID:  strings.Repeat("0", keyIDLen), Prefix: schemas.APIKeyPrefix + strings.Repeat("0", keyIDLen),
		Tenant: o.Tenant, Admin: o.Admin, Approver: o.Approver, Name: o.Name, RatePerSec: o.RatePerSec, Burst: o.Burst,
		CreatedAt: s.now().UTC().Truncate(time.Millisecond),
	}
	if err := rec.Validate(); err != nil {
		return "", schemas.APIKey{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	taken, err := s.keyIDs(ctx)
	if err != nil {
		return "", schemas.APIKey{}, err
	}
	for {
		key, id, err := newKey()
		if err != nil {
			return "", schemas.APIKey{}, err
		}
		if taken[id] {
			continue // 1 in 2^48 per key: draw again so ids stay unique
		}
		rec.KeyID, rec.Prefix = id, schemas.APIKeyPrefix+id
		h := Hash(key)
		rev, err := s.kv.Create(ctx, h, &rec)
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return "", schemas.APIKey{}, fmt.Errorf("apikey: create %s: %w", rec.Prefix, err)
		}
		s.remember(h, rec, rev)
		return key, rec, nil
	}
}

// newKey draws a key and returns it with its id.
func newKey() (key, id string, err error) {
	var b [keyIDBytes + secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("apikey: random: %w", err)
	}
	id = hex.EncodeToString(b[:keyIDBytes])
	return schemas.APIKeyPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(b[keyIDBytes:]), id, nil
}

// List returns tenant's keys ("" for every tenant's), revoked ones too,
// oldest first. It reads the bucket, not the cache.
func (s *Store) List(ctx context.Context, tenant string) ([]schemas.APIKey, error) {
	var out []schemas.APIKey
	err := s.scan(ctx, func(_ string, rec schemas.APIKey) {
		if tenant == "" || rec.Tenant == tenant {
			out = append(out, rec)
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b schemas.APIKey) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.KeyID, b.KeyID)
	})
	return out, nil
}

// Revoke revokes the key that ref names: its key id, its prefix (mk_<id>)
// or the whole key. It returns the key's record with RevokedAt. Revoking a
// revoked key changes nothing. No key: ErrNotFound; a ref of none of these
// shapes: ErrInvalid. Errors name the key by its prefix only.
func (s *Store) Revoke(ctx context.Context, ref string) (schemas.APIKey, error) {
	if s.kv == nil {
		return schemas.APIKey{}, ErrNoBucket
	}
	var h, id string
	switch {
	case wellFormed(ref):
		h, id = Hash(ref), ref[len(schemas.APIKeyPrefix):prefixLen]
	case strings.HasPrefix(ref, schemas.APIKeyPrefix) && isKeyID(ref[len(schemas.APIKeyPrefix):]):
		id = ref[len(schemas.APIKeyPrefix):]
	case isKeyID(ref):
		id = ref
	default:
		return schemas.APIKey{}, fmt.Errorf("%w: %q is not a key id (12 hex digits), a prefix (mk_<key id>) or a key", ErrInvalid, redact(ref))
	}
	if h == "" {
		err := s.scan(ctx, func(key string, rec schemas.APIKey) {
			if rec.KeyID == id {
				h = key
			}
		})
		if err != nil {
			return schemas.APIKey{}, err
		}
		if h == "" {
			return schemas.APIKey{}, fmt.Errorf("%w: %s%s", ErrNotFound, schemas.APIKeyPrefix, id)
		}
	}
	for {
		cur, rev, err := s.kv.Get(ctx, h)
		if errors.Is(err, bus.ErrNotFound) {
			return schemas.APIKey{}, fmt.Errorf("%w: %s%s", ErrNotFound, schemas.APIKeyPrefix, id)
		}
		if err != nil {
			return schemas.APIKey{}, fmt.Errorf("apikey: revoke %s%s: %w", schemas.APIKeyPrefix, id, err)
		}
		if cur.Revoked() {
			s.remember(h, *cur, rev)
			return *cur, nil
		}
		at := s.now().UTC().Truncate(time.Millisecond)
		cur.RevokedAt = &at
		next, err := s.kv.PutAt(ctx, h, cur, rev)
		if errors.Is(err, bus.ErrConflict) && ctx.Err() == nil {
			continue // written in between: read it again
		}
		if err != nil {
			return schemas.APIKey{}, fmt.Errorf("apikey: revoke %s: %w", cur.Prefix, err)
		}
		s.remember(h, *cur, next)
		return *cur, nil
	}
}

// redact shortens what may be a mistyped key so an error never shows one.
func redact(ref string) string {
	if len(ref) > prefixLen {
		return ref[:prefixLen] + "…"
	}
	return ref
}

// keyIDs returns the ids in use.
func (s *Store) keyIDs(ctx context.Context) (map[string]bool, error) {
	ids := map[string]bool{}
	err := s.scan(ctx, func(_ string, rec schemas.APIKey) { ids[rec.KeyID] = true })
	return ids, err
}

// scan calls fn with every record in the bucket and its hash. A value that
// does not decode is logged (by its hash) and skipped.
func (s *Store) scan(ctx context.Context, fn func(hash string, rec schemas.APIKey)) error {
	if s.raw == nil {
		return ErrNoBucket
	}
	w, err := s.raw.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("apikey: read keys: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("apikey: read keys: the watch ended early")
			}
			if e == nil {
				return nil
			}
			var rec schemas.APIKey
			if err := schemas.Decode(e.Value(), &rec); err != nil {
				s.log.Error("apikey: unreadable key record skipped", "hash", e.Key(), "err", err)
				continue
			}
			fn(e.Key(), rec)
		}
	}
}
