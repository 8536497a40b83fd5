package topology_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// EnsureJudge creates the judge's streams and buckets once, leaves them on
// a second call, and TeardownJudge removes exactly them.
func TestEnsureJudge(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	cfg := topology.JudgeConfig{Namespace: "jt"}
	for range 2 {
		topo, err := topology.EnsureJudge(opCtx(t), js, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if topo.Answers == nil || topo.Sessions == nil || topo.Approvals == nil {
			t.Fatal("missing bucket handle")
		}
	}
	want := []string{"JT_ARBITRATE", "JT_JUDGE", "JT_JUDGE_AUDIT", "KV_jt_judge_answers", "KV_jt_judge_approvals", "KV_jt_judge_sessions"}
	if got := names(t, js); !slices.Equal(got, want) {
		t.Errorf("streams %v, want %v", got, want)
	}
	for _, stream := range []string{"JT_JUDGE", "JT_ARBITRATE"} {
		if _, err := js.Consumer(opCtx(t), stream, bus.ConsumerJudges); err != nil {
			t.Errorf("consumer on %s: %v", stream, err)
		}
	}
	if err := topology.TeardownJudge(opCtx(t), js, "jt"); err != nil {
		t.Fatal(err)
	}
	if got := names(t, js); len(got) != 0 {
		t.Errorf("after teardown: %v", got)
	}
	if _, err := topology.EnsureJudge(opCtx(t), js, topology.JudgeConfig{Namespace: "Bad NS"}); err == nil {
		t.Error("EnsureJudge accepted an invalid namespace")
	}
}

// A judge topology made before arbitration had its stream keeps working:
// EnsureJudge adds the arbitration stream and its consumer beside it. An
// arbitration stream that does not take the arbitration subjects is
// reported, not used.
func TestEnsureJudgeOverOlderTopology(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ns := bus.Namespace("old")
	if _, err := js.CreateStream(opCtx(t), jetstream.StreamConfig{Name: ns.JudgeStream(), Subjects: []string{"old.v1.judge.*"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(opCtx(t), ns.JudgeStream(), jetstream.ConsumerConfig{Durable: bus.ConsumerJudges,
		AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "old.v1.judge.*"}); err != nil {
		t.Fatal(err)
	}
	if _, err := topology.EnsureJudge(opCtx(t), js, topology.JudgeConfig{Namespace: ns, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatalf("EnsureJudge over an older judge topology: %v", err)
	}
	if _, err := js.Consumer(opCtx(t), ns.ArbitrateStream(), bus.ConsumerJudges); err != nil {
		t.Errorf("no arbitration consumer: %v", err)
	}

	other := bus.Namespace("odd")
	if _, err := js.CreateStream(opCtx(t), jetstream.StreamConfig{Name: other.ArbitrateStream(), Subjects: []string{"odd.v1.arbitrate.acme"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	_, err := topology.EnsureJudge(opCtx(t), js, topology.JudgeConfig{Namespace: other, Storage: jetstream.MemoryStorage, StartupWait: time.Second})
	if !errors.Is(err, topology.ErrTopology) || !strings.Contains(err.Error(), "odd.v1.arbitrate.*") {
		t.Errorf("EnsureJudge over a narrow arbitration stream: %v, want ErrTopology naming the subject", err)
	}
}
