package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestBatchTenantBytes: one tenant's open batches hold at most
// MaxTenantBatchBytes of lines in the batch stream every tenant shares
// (finding 5: beta filled 200 MB of it in 3 s); over it the tenant gets a
// 429 naming the limit, and another tenant's batch still goes in.
func TestBatchTenantBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{MaxTenantBatchBytes: 64 << 10, RatePerSec: 1000, Burst: 1000}})
	body := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `{"custom_id":"c%d","task":"hanoi","params":{"disks":3},"k":1}`+"\n", i)
		}
		return b.String()
	}
	var rec schemas.BatchRecord
	e.do(http.MethodPost, "/v1/batches", e.key[beta], "application/jsonl", strings.NewReader(body(20))).decode(t, http.StatusCreated, &rec)
	if rec.StoredBytes <= 0 || rec.StoredBytes > 64<<10 {
		t.Fatalf("stored bytes %d", rec.StoredBytes)
	}
	pr := e.do(http.MethodPost, "/v1/batches", e.key[beta], "application/jsonl", strings.NewReader(body(500))).
		problem(t, http.StatusTooManyRequests, api.TypeRateLimited)
	if !strings.Contains(pr.Detail, "bytes") {
		t.Errorf("refusal %q does not name the byte limit", pr.Detail)
	}
	e.do(http.MethodPost, "/v1/batches", e.key[alpha], "application/jsonl", strings.NewReader(body(20))).decode(t, http.StatusCreated, &rec)
}
