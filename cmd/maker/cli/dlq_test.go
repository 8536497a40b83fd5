package cli

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestDLQReplayAllEmpty: replaying every dead letter of an empty DLQ says
// there was none (an empty array with --json) and succeeds.
func TestDLQReplayAllEmpty(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	if _, err := bus.Ensure(t.Context(), js, bus.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "replay", "--all"}, "no dead letters to replay\n"},
		{[]string{"dlq", "replay", "--all", "--job", "j1"}, "no dead letters to replay\n"},
		{[]string{"dlq", "replay", "--all", "--json"}, "[]\n"},
	} {
		res := runMain(t, append(tc.args, "--nats", srv.URL)...)
		if res.code != ExitOK || res.stdout != tc.want || res.stderr != "" {
			t.Errorf("maker %v: exit %d, stdout %q, stderr %q; want exit 0 and %q", tc.args, res.code, res.stdout, res.stderr, tc.want)
		}
	}
}
