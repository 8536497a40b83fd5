package schemas

import (
	"regexp"
	"time"
	"unicode/utf8"
)

// KindAPIKey is the kind of an API key's record (bucket maker_apikeys).
const KindAPIKey = "api_key"

// APIKeyPrefix starts every API key: a key is mk_<key_id>_<secret>.
const APIKeyPrefix = "mk_"

// APIKey is one API key of `maker serve`, stored in the API key bucket
// under the SHA-256 (lower-case hex) of the whole key. The key itself is
// never stored: it is shown once, when it is created. A revoked key stays
// in the bucket, with RevokedAt, so it is still listed.
type APIKey struct {
	Header
	// KeyID names the key: 12 lower-case hex digits from a random source,
	// the part of the key after mk_ and before the secret.
	KeyID string `json:"key_id"`
	// Prefix is mk_<key_id>, the part of the key safe to show in lists.
	Prefix string `json:"prefix"`
	// Tenant is the tenant every request made with the key acts for.
	Tenant string `json:"tenant"`
	// Admin keys may also use the fleet-wide views (every tenant's jobs,
	// quotas, task registration) and decide any tenant's steps.
	Admin bool `json:"admin,omitempty"`
	// Approver keys belong to a person who may answer the steps of the
	// key's tenant's jobs that wait for one (POST /v1/jobs/{id}/decide);
	// the decision is recorded as by the key's Name (its Prefix when it
	// has none). Other tenant keys may not decide.
	Approver bool `json:"approver,omitempty"`
	// Name is a note for people, e.g. who holds the key (optional, at most
	// 64 printable characters).
	Name string `json:"name,omitempty"`
	// RatePerSec caps the key's requests per second and Burst the bucket
	// of its rate limit (0: the server's defaults).
	RatePerSec float64 `json:"rate_per_sec,omitempty" jsonschema:"minimum=0"`
	Burst      int     `json:"burst,omitempty" jsonschema:"minimum=0"`
	// CreatedAt is when the key was made; RevokedAt when it was revoked
	// (absent while it is valid).
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

var keyIDRE = regexp.MustCompile(`^[0-9a-f]{12}$`)

// API key bounds.
const (
	maxKeyName  = 64
	maxKeyRate  = 1_000_000
	maxKeyBurst = 1_000_000
)

// MessageKind implements Message.
func (*APIKey) MessageKind() string { return KindAPIKey }

// Validate implements Message.
func (k *APIKey) Validate() error {
	const kind = KindAPIKey
	if err := k.Header.check(kind); err != nil {
		return err
	}
	if !keyIDRE.MatchString(k.KeyID) {
		return invalid(kind, "key_id %q must be 12 lower-case hex digits", k.KeyID)
	}
	if k.Prefix != APIKeyPrefix+k.KeyID {
		return invalid(kind, "prefix %q must be %s%s", k.Prefix, APIKeyPrefix, k.KeyID)
	}
	if err := ValidTenant(k.Tenant); err != nil {
		return err
	}
	if utf8.RuneCountInString(k.Name) > maxKeyName {
		return invalid(kind, "name is longer than %d characters", maxKeyName)
	}
	for _, r := range k.Name {
		if r < 0x20 || r == 0x7f {
			return invalid(kind, "name holds a control character")
		}
	}
	if !inRange(k.RatePerSec, 0, maxKeyRate) {
		return invalid(kind, "rate_per_sec must be between 0 and %d, got %v", maxKeyRate, k.RatePerSec)
	}
	if k.Burst < 0 || k.Burst > maxKeyBurst {
		return invalid(kind, "burst must be between 0 and %d, got %d", maxKeyBurst, k.Burst)
	}
	if k.CreatedAt.IsZero() {
		return invalid(kind, "created_at is required")
	}
	return nil
}

// Revoked reports whether the key was revoked.
func (k *APIKey) Revoked() bool { return k.RevokedAt != nil }
