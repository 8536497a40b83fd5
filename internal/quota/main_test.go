package quota_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (the store's
// watch ends with its context). One per package: budget and forecast
// tests share it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
