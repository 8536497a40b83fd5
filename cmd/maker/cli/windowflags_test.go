package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// windows are the duplicate windows of the sample, result and journal
// streams of a namespace.
type windows struct{ samples, results, journal time.Duration }

// streamWindows reads the windows of namespace ns's streams on the server
// at url, waiting for the journal's stream (made last of the three).
func streamWindows(t *testing.T, url string, ns bus.Namespace) windows {
	t.Helper()
	_, js := testkit.Connect(t, url)
	get := func(name string) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, name)
		if err != nil {
			return 0, err
		}
		return s.CachedInfo().Config.Duplicates, nil
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		_, err := get(ns.JournalStream())
		return err == nil
	}, "no stream %s", ns.JournalStream())
	var w windows
	for _, s := range []struct {
		name string
		dst  *time.Duration
	}{{ns.SamplesStream(), &w.samples}, {ns.ResultsStream(), &w.results}, {ns.JournalStream(), &w.journal}} {
		d, err := get(s.name)
		if err != nil {
			t.Fatal(err)
		}
		*s.dst = d
	}
	return w
}

// createdWindows records the windows of every stream created on the
// server at url from now on, from the server's API audit advisories: a
// command whose streams are gone when it ends (maker run's and bench's
// private namespaces) is seen creating them. The returned function gives
// the windows of the namespace whose journal stream was created.
func createdWindows(t *testing.T, url string) func() (windows, bool) {
	t.Helper()
	nc, _ := testkit.Connect(t, url)
	var (
		mu      sync.Mutex
		created = map[string]time.Duration{}
	)
	sub, err := nc.Subscribe(server.JSAuditAdvisory, func(m *nats.Msg) {
		var a server.JSAPIAudit
		if json.Unmarshal(m.Data, &a) != nil || !strings.HasPrefix(a.Subject, "$JS.API.STREAM.CREATE.") {
			return
		}
		var sc jetstream.StreamConfig
		if json.Unmarshal([]byte(a.Request), &sc) != nil {
			return
		}
		mu.Lock()
		created[sc.Name] = sc.Duplicates
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() (windows, bool) {
		mu.Lock()
		defer mu.Unlock()
		for name, journal := range created {
			if prefix, ok := strings.CutSuffix(name, "_JOURNAL"); ok {
				return windows{created[prefix+"_SAMPLES"], created[prefix+"_RESULTS"], journal}, true
			}
		}
		return windows{}, false
	}
}

// TestWindowFlags: --work-duplicates and --journal-duplicates of every
// command that creates the fleet's streams reach the streams it creates,
// on a real nats-server; maker topology create given a window sets it on
// existing streams too (and only the one given), and topology show lists
// the windows; a window out of bounds is a usage error.
func TestWindowFlags(t *testing.T) {
	t.Parallel()
	ns := bus.DefaultNamespace
	var with []string
	walk(newRoot(&env{}), func(cmd *cobra.Command) {
		w, j := cmd.Flags().Lookup(workDuplicatesFlag), cmd.Flags().Lookup(journalDuplicatesFlag)
		if w == nil || j == nil {
			return
		}
		with = append(with, strings.Join(commandPath(cmd), " "))
		if w.DefValue != topology.DefaultWorkDuplicates.String() || j.DefValue != topology.DefaultJournalDuplicates.String() {
			t.Errorf("%s: defaults %s and %s, want the topology's", cmd.CommandPath(), w.DefValue, j.DefValue)
		}
	})
	slices.Sort(with)
	if want := []string{"bench", "coordinator", "run", "topology create", "up"}; !slices.Equal(with, want) {
		t.Errorf("commands with the window flags: %v, want %v (every one that creates the fleet's streams with its own settings)", with, want)
	}

	t.Run("topology create", func(t *testing.T) {
		t.Parallel()
		srv := testkit.StartNATS(t).URL
		create := func(want windows, args ...string) {
			t.Helper()
			if res := runMain(t, append([]string{"topology", "create", "--nats", srv}, args...)...); res.code != ExitOK {
				t.Fatalf("topology create %v: exit %d, %s", args, res.code, res.stderr)
			}
			if got := streamWindows(t, srv, ns); got != want {
				t.Errorf("after topology create %v: windows %+v, want %+v", args, got, want)
			}
		}
		create(windows{45 * time.Second, 45 * time.Second, 3 * time.Minute}, "--work-duplicates", "45s", "--journal-duplicates", "3m")
		create(windows{45 * time.Second, 45 * time.Second, 3 * time.Minute})
		create(windows{45 * time.Second, 45 * time.Second, 2 * time.Minute}, "--journal-duplicates", "2m")
		create(windows{time.Minute, time.Minute, 2 * time.Minute}, "--work-duplicates", "1m")
		res := runMain(t, "topology", "show", "--json", "--nats", srv)
		var rows []topologyRow
		if err := json.Unmarshal([]byte(res.stdout), &rows); err != nil {
			t.Fatalf("topology show: %q: %v", res.stdout, err)
		}
		shown := map[string]string{}
		for _, r := range rows {
			shown[r.Name] = r.Duplicates
		}
		for name, want := range map[string]string{ns.SamplesStream(): "1m0s", ns.JournalStream(): "2m0s", ns.JobsStream(): "10m0s", ns.JobsBucket(): ""} {
			if shown[name] != want {
				t.Errorf("topology show: %s duplicate window %q, want %q", name, shown[name], want)
			}
		}
		if res := runMain(t, "topology", "show", "--nats", srv); !strings.Contains(res.stdout, "DUPLICATE WINDOW") {
			t.Errorf("topology show does not list the windows:\n%s", res.stdout)
		}
		for _, args := range [][]string{{"--work-duplicates", "5s"}, {"--journal-duplicates", "25h"}} {
			if res := runMain(t, append([]string{"topology", "create", "--nats", srv}, args...)...); res.code != ExitUsage || !strings.Contains(res.stderr, "window") {
				t.Errorf("topology create %v: exit %d, %q; want a usage error", args, res.code, res.stderr)
			}
		}
	})

	t.Run("coordinator", func(t *testing.T) {
		t.Parallel()
		srv := testkit.StartNATS(t).URL
		startService(t, "coordinator", "--nats", srv, "--redis", testkit.StartRedis(t).URL(), "--metrics-addr", "127.0.0.1:0",
			"--work-duplicates", "40s", "--journal-duplicates", "4m")
		if got, want := streamWindows(t, srv, ns), (windows{40 * time.Second, 40 * time.Second, 4 * time.Minute}); got != want {
			t.Errorf("coordinator: windows %+v, want %+v", got, want)
		}
		if res := runMain(t, "coordinator", "--nats", srv, "--work-duplicates", "10s"); res.code != ExitUsage {
			t.Errorf("coordinator --work-duplicates 10s: exit %d, want %d", res.code, ExitUsage)
		}
	})

	t.Run("up", func(t *testing.T) {
		t.Parallel()
		srv := testkit.StartNATS(t).URL
		startService(t, "up", "--nats", srv, "--redis", testkit.StartRedis(t).URL(), "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
			"--demo-disks", "0", "--work-duplicates", "50s", "--journal-duplicates", "5m")
		if got, want := streamWindows(t, srv, ns), (windows{50 * time.Second, 50 * time.Second, 5 * time.Minute}); got != want {
			t.Errorf("up: windows %+v, want %+v", got, want)
		}
	})

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"run", []string{"run", "-q", "--disks", "2", "--k", "1"}},
		{"bench", []string{"bench", "--disks", "2", "--runs", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testkit.StartNATS(t).URL
			got := createdWindows(t, srv)
			args := append(tc.args, "--nats", srv, "--redis", testkit.StartRedis(t).URL(), "--work-duplicates", "20s", "--journal-duplicates", "90s")
			if res := runMain(t, args...); res.code != ExitOK {
				t.Fatalf("%v: exit %d, %s", args, res.code, res.stderr)
			}
			if w, ok := got(); !ok || w != (windows{20 * time.Second, 20 * time.Second, 90 * time.Second}) {
				t.Errorf("%v: created windows %+v (seen %v), want 20s, 20s, 1m30s", args, w, ok)
			}
			if res := runMain(t, append(tc.args, "--nats", srv, "--journal-duplicates", "100ms")...); res.code != ExitUsage {
				t.Errorf("%s --journal-duplicates 100ms: exit %d, want %d", tc.name, res.code, ExitUsage)
			}
		})
	}
}
