package tracing_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Tests here install the process's tracer provider: none runs in
// parallel.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
