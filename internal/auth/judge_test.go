package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/judge"
)

// TestAuthJudge: a judge on its identity answers a tenant's break-glass
// request asked by the api identity (maker serve asks for its keys'
// tenants), and neither is refused anything.
func TestAuthJudge(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 1})
	jc := srv.Connect(t, auth.Judge)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, err := jetstream.New(jc.Conn)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := judge.New(ctx, js, judge.Config{Settings: judgetest.TestSettings(), BaseURL: sim.URL(), Concurrency: 2,
		SoftStop: 5 * time.Second, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatalf("judge: %v (violations %v)", err, jc.Violations())
	}
	if err := sv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Stop)

	tc := srv.Connect(t, auth.API)
	tjs, err := jetstream.New(tc.Conn)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := judgeclient.Ask(ctx, tjs, bus.DefaultNamespace, judgetest.Request("r1", "s1", "the build fails with a linker error"))
	if err != nil {
		t.Fatalf("ask: %v (api violations %v, judge violations %v)", err, tc.Violations(), jc.Violations())
	}
	if resp.RequestID != "r1" {
		t.Errorf("answer of %q", resp.RequestID)
	}
	for _, c := range []*authtest.Conn{jc, tc} {
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, v := range c.Violations() {
			t.Errorf("%s was refused: %v", c.Identity, v)
		}
	}
}
