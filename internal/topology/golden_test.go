package topology_test

import (
	"context"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/calibrate"
	"github.com/makerfleet/makerfleet/internal/retention"
	"github.com/makerfleet/makerfleet/internal/topology"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json from what the server holds")

// serverTopology is what a server holds after the topology is created:
// every stream's config (a bucket is the stream KV_<bucket>) and every
// consumer's, as the server reports them.
type serverTopology struct {
	Streams   map[string]jetstream.StreamConfig   `json:"streams"`
	Consumers map[string]jetstream.ConsumerConfig `json:"consumers"`
}

func readTopology(t *testing.T, ctx context.Context, js jetstream.JetStream) serverTopology {
	t.Helper()
	out := serverTopology{Streams: map[string]jetstream.StreamConfig{}, Consumers: map[string]jetstream.ConsumerConfig{}}
	for _, name := range names(t, js) {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		sc := s.CachedInfo().Config
		// The server's own marks (its version, its API level) are not the
		// topology's.
		maps.DeleteFunc(sc.Metadata, func(k, _ string) bool { return strings.HasPrefix(k, "_nats.") })
		if len(sc.Metadata) == 0 {
			sc.Metadata = nil
		}
		out.Streams[name] = sc
		list := s.ListConsumers(ctx)
		for ci := range list.Info() {
			cc := ci.Config
			maps.DeleteFunc(cc.Metadata, func(k, _ string) bool { return strings.HasPrefix(k, "_nats.") })
			if len(cc.Metadata) == 0 {
				cc.Metadata = nil
			}
			out.Consumers[name+"/"+ci.Name] = cc
		}
		if err := list.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestTopologyGolden creates the fleet's and the judge's topology (and
// the buckets features create when first written) with several configs,
// and compares every stream, bucket and consumer the server then holds,
// field by field, with testdata: what the topology declares may
// move in the code, but what it makes on a server never changes unnoticed.
func TestTopologyGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fleet topology.Config
		judge topology.JudgeConfig
	}{
		{name: "default"},
		{name: "memory", fleet: topology.Config{Storage: jetstream.MemoryStorage}, judge: topology.JudgeConfig{Storage: jetstream.MemoryStorage}},
		{name: "tuned",
			fleet: topology.Config{Namespace: "team-a", WorkStorage: jetstream.MemoryStorage, WorkDuplicates: time.Minute,
				JournalDuplicates: 3 * time.Minute, SampleAckWait: 45 * time.Second, SampleMaxDeliver: 4,
				JobAckWait: 90 * time.Second, MaxMsgSize: 2 << 20,
				Limits: topology.Limits{QueuedJobsPerTenant: -1, DeadLettersPerJob: 5, JobsBytes: 12 << 20, ResultsBytes: -1, DLQBytes: 3 << 20, BatchesBytes: 7 << 20}},
			judge: topology.JudgeConfig{Namespace: "team-a", AckWait: 2 * time.Minute, MaxDeliver: 5, AnswerTTL: 48 * time.Hour,
				MaxMsgSize: 512 << 10, QueuedPerTenant: -1, RequestBytes: 1 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := jetStream(t)
			ctx := opCtx(t)
			topo, err := topology.Ensure(ctx, js, tc.fleet)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := topology.EnsureJudge(ctx, js, tc.judge); err != nil {
				t.Fatal(err)
			}
			if _, err := retention.OpenBucket(ctx, topo); err != nil {
				t.Fatal(err)
			}
			if _, err := calibrate.OpenBucket(ctx, js, topo.NS, true); err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(readTopology(t, ctx, js), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.name+".json")
			if *update {
				if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var want, have serverTopology
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(got, &have); err != nil {
				t.Fatal(err)
			}
			compareTopology(t, want, have)
		})
	}
}

// compareTopology reports every stream, bucket and consumer whose config
// differs, field by field (as JSON), and every one missing or extra.
func compareTopology(t *testing.T, want, have serverTopology) {
	t.Helper()
	diff := func(kind, name string, w, h any) {
		var wm, hm map[string]any
		wb, _ := json.Marshal(w)
		hb, _ := json.Marshal(h)
		_ = json.Unmarshal(wb, &wm)
		_ = json.Unmarshal(hb, &hm)
		keys := map[string]bool{}
		for k := range wm {
			keys[k] = true
		}
		for k := range hm {
			keys[k] = true
		}
		for k := range keys {
			wv, _ := json.Marshal(wm[k])
			hv, _ := json.Marshal(hm[k])
			if string(wv) != string(hv) {
				t.Errorf("%s %s: field %s is %s, want %s", kind, name, k, hv, wv)
			}
		}
	}
	for _, name := range sortedKeys(want.Streams, have.Streams) {
		w, wok := want.Streams[name]
		h, hok := have.Streams[name]
		if wok != hok {
			t.Errorf("stream %s: present %v, want %v", name, hok, wok)
			continue
		}
		diff("stream", name, w, h)
	}
	for _, name := range sortedKeys(want.Consumers, have.Consumers) {
		w, wok := want.Consumers[name]
		h, hok := have.Consumers[name]
		if wok != hok {
			t.Errorf("consumer %s: present %v, want %v", name, hok, wok)
			continue
		}
		diff("consumer", name, w, h)
	}
}

func sortedKeys[V any](a, b map[string]V) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
