package store

import "github.com/redis/go-redis/v9"

// Client returns the Redis client the store runs on, for the packages
// that keep other shared counters beside the tally (internal/quota: rate,
// in-flight and running-job limits, budgets).
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Prefix returns the store's key prefix (Config.KeyPrefix): keys of other
// packages start with it too, so a namespace's keys go together.
func (s *Store) Prefix() string { return s.prefix }
