package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// The headers of a delivery (Standard Webhooks).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts a secret as tenants see it.
const SecretPrefix = "whsec_"

// TenantKey is tenant's signing key: HMAC-SHA256 of the master secret
// over a label and the tenant, so one tenant's key tells nothing of
// another's or of the master.
func TenantKey(master []byte, tenant string) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte("makerfleet webhook key v1\x00" + tenant))
	return m.Sum(nil)
}

// Secret is key as a tenant sees it: whsec_<base64 key>.
func Secret(key []byte) string { return SecretPrefix + base64.StdEncoding.EncodeToString(key) }

// ParseSecret is the key of a whsec_ secret.
func ParseSecret(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, SecretPrefix))
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("webhook: secret is not whsec_<base64>")
	}
	return b, nil
}

// Sign is the webhook-signature header of a delivery: v1,<base64
// HMAC-SHA256(key, "<id>.<timestamp>.<body>")>.
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}
