package apikey

import (
	"encoding/base64"
	"strings"
	"testing"
)

// FuzzWellFormed: the key parser never panics, takes only mk_ + 12
// lower-case hex + _ + 32 bytes of base64url, and takes every key newKey
// draws.
func FuzzWellFormed(f *testing.F) {
	key, _, err := newKey()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{key, "", "mk_", key + "=", strings.ToUpper(key), key[:KeyLen-1], "mk_0123456789ab_" + strings.Repeat("/", 43)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !wellFormed(s) {
			return
		}
		if len(s) != KeyLen || !strings.HasPrefix(s, "mk_") || s[prefixLen] != '_' || !isKeyID(s[3:prefixLen]) {
			t.Fatalf("took %q", s)
		}
		b, err := base64.RawURLEncoding.DecodeString(s[prefixLen+1:])
		if err != nil || len(b) != secretBytes || base64.RawURLEncoding.EncodeToString(b) != s[prefixLen+1:] {
			t.Fatalf("took %q: secret %v, %v", s, b, err)
		}
	})
}

func TestNewKeyWellFormed(t *testing.T) {
	t.Parallel()
	ids := map[string]bool{}
	for range 1000 {
		key, id, err := newKey()
		if err != nil {
			t.Fatal(err)
		}
		if !wellFormed(key) || key[3:prefixLen] != id || ids[id] {
			t.Fatalf("newKey = %q, %q (seen %v)", key, id, ids[id])
		}
		ids[id] = true
	}
}
