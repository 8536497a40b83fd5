package topology_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestMain checks that no goroutine of ours outlives the tests. Two of
// the embedded nats-server's own are let go: a file store created while
// its server shuts down (an Ensure still creating the topology when a
// test ends) keeps its flush loop, and with it the server's shared clock
// (seen in CI once the topology grew to six streams and eight buckets).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}

// jetStream connects a JetStream client to a fresh in-process server.
func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	return connect(t, testkit.StartNATS(t).URL)
}

// connect returns a JetStream client of the server at url.
func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	_, js := testkit.Connect(t, url)
	return js
}

// opCtx bounds one operation of a test, and longCtx one that waits for
// another role.
func opCtx(t *testing.T) context.Context { return timeout(t, 10*time.Second) }

func longCtx(t *testing.T) context.Context { return timeout(t, 20*time.Second) }

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// names lists the streams on the server (KV buckets are streams KV_<bucket>).
func names(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var out []string
	l := js.StreamNames(opCtx(t))
	for n := range l.Name() {
		out = append(out, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
