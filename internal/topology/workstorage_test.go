package topology_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/topology"
)

// The work queues' storage and the duplicate windows are the config's;
// by default every stream is on file with the sized windows (30s on the
// work queues, 1m on the journal), and the journal stays on file whatever
// the work queues' storage.
func TestEnsureWorkStorageAndWindows(t *testing.T) {
	t.Parallel()
	type want struct {
		storage    jetstream.StorageType
		duplicates time.Duration
	}
	for _, tc := range []struct {
		name                      string
		cfg                       topology.Config
		samples, results, journal want
	}{
		{"defaults", topology.Config{},
			want{jetstream.FileStorage, 30 * time.Second}, want{jetstream.FileStorage, 30 * time.Second}, want{jetstream.FileStorage, time.Minute}},
		{"work queues in memory, other windows",
			topology.Config{WorkStorage: jetstream.MemoryStorage, WorkDuplicates: 45 * time.Second, JournalDuplicates: 5 * time.Minute},
			want{jetstream.MemoryStorage, 45 * time.Second}, want{jetstream.MemoryStorage, 45 * time.Second}, want{jetstream.FileStorage, 5 * time.Minute}},
		{"everything in memory", topology.Config{Storage: jetstream.MemoryStorage},
			want{jetstream.MemoryStorage, 30 * time.Second}, want{jetstream.MemoryStorage, 30 * time.Second}, want{jetstream.MemoryStorage, time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			js := jetStream(t)
			ctx := opCtx(t)
			topo, err := topology.Ensure(ctx, js, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ns := topo.NS
			for stream, w := range map[string]want{ns.SamplesStream(): tc.samples, ns.ResultsStream(): tc.results, ns.JournalStream(): tc.journal} {
				s, err := js.Stream(ctx, stream)
				if err != nil {
					t.Fatal(err)
				}
				c := s.CachedInfo().Config
				if c.Storage != w.storage || c.Duplicates != w.duplicates {
					t.Errorf("%s: storage %v, duplicate window %v; want %v, %v", stream, c.Storage, c.Duplicates, w.storage, w.duplicates)
				}
			}
		})
	}
}
