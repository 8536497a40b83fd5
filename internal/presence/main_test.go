package presence_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine of ours outlives the tests (the
// embedded nats-server's file store flush loop and clock are its own).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}
