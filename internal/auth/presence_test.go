package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// TestAuthPresence: on a secured server each role writes only its own
// presence keys (voter.<id>, coordinator.<id>), and the api (maker serve,
// GET /v1/fleet) reads them and writes none.
func TestAuthPresence(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	ns := bus.DefaultNamespace
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	coord := srv.Connect(t, auth.Coordinator)
	js, err := jetstream.New(coord.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatalf("the coordinator makes the topology: %v (violations %v)", err, coord.Violations())
	}
	b := ns.PresenceBucket()
	kvSubj := func(key string) string { return "$KV." + b + "." + key }
	runRefusals(ctx, t, srv, []refusal{
		{"voter writes its presence", auth.Voter, kvPut(b, "voter.v1"), ""},
		{"voter writes a coordinator's presence", auth.Voter, kvPut(b, "coordinator.c1"), kvSubj("coordinator.c1")},
		{"voter writes outside the roles' keys", auth.Voter, kvPut(b, "api.x"), kvSubj("api.x")},
		{"coordinator writes its presence", auth.Coordinator, kvPut(b, "coordinator.c1"), ""},
		{"coordinator writes a voter's presence", auth.Coordinator, kvPut(b, "voter.v1"), kvSubj("voter.v1")},
		{"api reads the presence records", auth.API, kvWatch(b, ">"), ""},
		{"api writes a presence record", auth.API, kvPut(b, "voter.v1"), kvSubj("voter.v1")},
		{"approver reads the presence records", auth.Approver, kvWatch(b, ">"), "$JS.API.STREAM.INFO.KV_" + b},
	})
}
