package cli

import (
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestClientCommandsCreateNothing: the commands that read or change what a
// fleet holds, run against a NATS server without one, say so and leave the
// server as they found it: without a stream or bucket.
func TestClientCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	const noFleet = "no makerfleet topology on this server (namespace maker): start a coordinator, or run maker topology create"
	const noJudge = "no break-glass (judge) topology on this server (namespace maker)"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "j1"}, noFleet},
		{[]string{"status", "j1", "--json"}, noFleet},
		{[]string{"result", "j1"}, noFleet},
		{[]string{"jobs", "list"}, noFleet},
		{[]string{"jobs", "list", "--json"}, noFleet},
		{[]string{"jobs", "list", "--all-tenants"}, noFleet},
		{[]string{"dlq", "list"}, noFleet},
		{[]string{"dlq", "list", "--json"}, noFleet},
		{[]string{"dlq", "list", "--all-tenants"}, noFleet},
		{[]string{"dlq", "replay", "--all"}, noFleet},
		{[]string{"pause", "j1"}, noFleet},
		{[]string{"resume", "j1"}, noFleet},
		{[]string{"cancel", "j1"}, noFleet},
		{[]string{"decide", "j1", "--step", "0", "--vote", "x"}, noFleet},
		{[]string{"judge", "pending"}, noJudge},
		{[]string{"judge", "audit", "--json"}, noJudge},
		{[]string{"judge", "approve", "bg-1", "--by", "alice"}, noJudge},
		{[]string{"judge", "deny", "bg-1", "--by", "alice"}, noJudge},
	} {
		res := runMain(t, append(tc.args, "--nats", srv.URL)...)
		if res.code != ExitError || res.stdout != "" || !strings.HasPrefix(res.stderr, "maker: "+srv.URL+": "+tc.want) {
			t.Errorf("maker %s: exit %d, stdout %q, stderr %q; want exit %d and %q",
				strings.Join(tc.args, " "), res.code, res.stdout, res.stderr, ExitError, tc.want)
		}
		var made []string
		l := js.StreamNames(t.Context())
		for n := range l.Name() {
			made = append(made, n)
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		if len(made) > 0 {
			t.Fatalf("maker %s created %v", strings.Join(tc.args, " "), made)
		}
	}
}
