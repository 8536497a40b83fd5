package step

import (
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestCapabilityVerify: a sample's token verifies for that sample id
// only: not for another index, attempt, branch, step, epoch, job or
// tenant, not under another key, and nothing that is not a token (empty,
// short, oversized, one bit off) does.
func TestCapabilityVerify(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	c := newCapabilities(key)
	id := schemas.BranchSampleID("alpha", "j1", 4, 2, 1, 0, 0)
	tok := c.token(id)
	if !schemas.ValidSampleToken(tok) {
		t.Fatalf("token %q has not the wire shape", tok)
	}
	if again := newCapabilities(key).token(id); again != tok {
		t.Fatalf("the same key and id give %q and %q", tok, again)
	}
	flipped := []byte(tok)
	flipped[len(flipped)-1] ^= 1 // a base64url character one bit off is another one
	for _, tc := range []struct {
		name     string
		sampleID string
		token    string
		want     bool
	}{
		{"its own", id, tok, true},
		{"another index's", id, c.token(schemas.BranchSampleID("alpha", "j1", 4, 2, 2, 0, 0)), false},
		{"another attempt's", id, c.token(schemas.BranchSampleID("alpha", "j1", 4, 2, 1, 1, 0)), false},
		{"another branch's", id, c.token(schemas.BranchSampleID("alpha", "j1", 4, 2, 1, 0, 3)), false},
		{"another step's", id, c.token(schemas.BranchSampleID("alpha", "j1", 5, 2, 1, 0, 0)), false},
		{"another epoch's", id, c.token(schemas.BranchSampleID("alpha", "j1", 4, 3, 1, 0, 0)), false},
		{"another job's", id, c.token(schemas.BranchSampleID("alpha", "j2", 4, 2, 1, 0, 0)), false},
		{"another tenant's", id, c.token(schemas.BranchSampleID("beta", "j1", 4, 2, 1, 0, 0)), false},
		{"its own, for a branch of it", schemas.BranchSampleID("alpha", "j1", 4, 2, 1, 0, 3), tok, false},
		{"under another key", id, newCapabilities([]byte("another key of the fleet, 32 b.")).token(id), false},
		{"under a key of its own (a machine without the fleet's)", id, newCapabilities(nil).token(id), false},
		{"empty", id, "", false},
		{"short", id, tok[:schemas.SampleTokenLen-1], false},
		{"oversized", id, tok + tok, false},
		{"its own, twice over", id, strings.Repeat(tok, 1000), false},
		{"one bit off", id, string(flipped), false},
		{"padded", id, tok[:schemas.SampleTokenLen-2] + "==", false},
		{"all A", id, strings.Repeat("A", schemas.SampleTokenLen), false},
	} {
		if got := c.verify(tc.sampleID, tc.token); got != tc.want {
			t.Errorf("%s: verify %v, want %v", tc.name, got, tc.want)
		}
	}
}

// BenchmarkCapability is the cost a token adds per request (token) and
// per result (verify).
func BenchmarkCapability(b *testing.B) {
	c := newCapabilities([]byte("0123456789abcdef0123456789abcdef"))
	id := schemas.BranchSampleID("alpha", "job-with-a-long-name-1", 1234, 5, 17, 1, 0)
	tok := c.token(id)
	b.Run("token", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = c.token(id)
		}
	})
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !c.verify(id, tok) {
				b.Fatal("no")
			}
		}
	})
}
