package pricetable_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (the cache's
// watch ends with its context).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
