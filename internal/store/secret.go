package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// The coordinators' secrets live in one hash of the store, which only
// coordinators reach (voters, judges and clients never hold the Redis
// password):
//
//	maker:secrets  hash  sample_key -> the key of sample capabilities (base64, 32 bytes)
//
// The first coordinator that finds no key creates it (HSETNX), so every
// coordinator of the fleet, started in any order, reads the same one.

// SampleKeyBytes is the length of the key of sample capabilities.
const SampleKeyBytes = 32

// sampleKeyField is the field of the secrets hash that holds it.
const sampleKeyField = "sample_key"

// ErrSecret means a secret in the store is not what this build wrote.
var ErrSecret = errors.New("store: bad secret")

// secretsKey is the hash of the fleet's secrets.
func secretsKey(prefix string) string { return prefix + ":secrets" }

// SampleKey returns the fleet's key of sample capabilities (the
// coordinators' HMAC key of SampleRequest.Token), creating it once, at
// random, if the store has none. A key that is not SampleKeyBytes of
// base64 is refused (ErrSecret) rather than replaced: another coordinator
// may be using it.
func (s *Store) SampleKey(ctx context.Context) ([]byte, error) {
	key := secretsKey(s.prefix)
	fresh := make([]byte, SampleKeyBytes)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("store: make the sample key: %w", err)
	}
	if err := s.rdb.HSetNX(ctx, key, sampleKeyField, base64.StdEncoding.EncodeToString(fresh)).Err(); err != nil {
		return nil, fmt.Errorf("store: create the sample key: %w", err)
	}
	v, err := s.rdb.HGet(ctx, key, sampleKeyField).Result()
	if err != nil {
		return nil, fmt.Errorf("store: read the sample key: %w", err)
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(b) != SampleKeyBytes {
		return nil, fmt.Errorf("%w: %s field %s is not %d bytes of base64 (delete the field, with no job running, to have a new key made)",
			ErrSecret, key, sampleKeyField, SampleKeyBytes)
	}
	return b, nil
}
