package topology_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// TestBoundsDocumented: the stream rows of docs/security.md's "Bounds on
// what is shared" give the table's defaults, so the doc stays true when a
// limit changes.
func TestBoundsDocumented(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	ns := bus.DefaultNamespace
	streams := map[string]jetstream.StreamConfig{}
	for _, d := range topology.Table(ns, topology.Config{}, topology.JudgeConfig{}) {
		if d.Kind == topology.Stream {
			streams[d.Name()] = d.Stream
		}
	}
	for _, row := range []struct {
		resource, stream string
		perSubject       bool // the row gives the per-subject limit
		bytes            bool // the row gives the byte limit
	}{
		{"the batch-lines stream", ns.BatchesStream(), false, true},
		{"a tenant's jobs waiting for intake", ns.JobsStream(), true, false},
		{"the jobs stream", ns.JobsStream(), false, true},
		{"results (voters publish)", ns.ResultsStream(), false, true},
		{"dead letters (voters publish)", ns.DLQStream(), true, true},
		{"break-glass requests waiting for a judge", ns.JudgeStream(), true, true},
		{"break-glass requests waiting for a judge", ns.ArbitrateStream(), false, true},
	} {
		sc, ok := streams[row.stream]
		if !ok {
			t.Fatalf("no stream %s in the table", row.stream)
		}
		cell := boundCell(t, doc, row.resource)
		var want []string
		if row.bytes {
			want = append(want, size(sc.MaxBytes))
		}
		if row.perSubject {
			want = append(want, count(sc.MaxMsgsPerSubject)+" ")
		}
		if sc.Discard == jetstream.DiscardOld {
			want = append(want, "the oldest dropped")
		}
		for _, w := range want {
			if !strings.Contains(cell, w) {
				t.Errorf("docs/security.md, bound of %q is %q: want %q (stream %s)", row.resource, cell, w, row.stream)
			}
		}
	}
	if flat := strings.Join(strings.Fields(doc), " "); !strings.Contains(flat, "takes at most "+size(topology.MemoryStreamBytes)) {
		t.Errorf("docs/security.md: want a memory stream to take at most %s", size(topology.MemoryStreamBytes))
	}
}

// boundCell returns the bound column of the table row of resource.
func boundCell(t *testing.T, doc, resource string) string {
	t.Helper()
	for line := range strings.SplitSeq(doc, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) > 3 && strings.TrimSpace(cells[1]) == resource {
			return strings.TrimSpace(cells[2])
		}
	}
	t.Fatalf("docs/security.md: no row %q in the bounds table", resource)
	return ""
}

func size(b int64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", b>>30)
	}
	return fmt.Sprintf("%d MiB", b>>20)
}

// count writes n as the docs do: 10,000.
func count(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestWindowsDocumented: the rows of docs/durability.md's "Duplicate
// windows" table give the table's default window of each stream they
// name, every stream of the table has its row, and the flags' defaults
// and bounds are the package's.
func TestWindowsDocumented(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../docs/durability.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	_, section, ok := strings.Cut(doc, "## Duplicate windows\n")
	if !ok {
		t.Fatal(`docs/durability.md: no section "Duplicate windows"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]string{} // stream: its window cell
	for line := range strings.SplitSeq(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`MAKER_") {
			continue
		}
		for name := range strings.SplitSeq(cells[1], ",") {
			rows[strings.Trim(strings.TrimSpace(name), "`")] = strings.TrimSpace(cells[2])
		}
	}
	text := func(d time.Duration) string {
		if d < time.Minute {
			return fmt.Sprintf("%d s", int(d.Seconds()))
		}
		return fmt.Sprintf("%d min", int(d.Minutes()))
	}
	for _, d := range topology.Table(bus.DefaultNamespace, topology.Config{}, topology.JudgeConfig{}) {
		if d.Kind != topology.Stream {
			continue
		}
		if cell, ok := rows[d.Name()]; !ok {
			t.Errorf("docs/durability.md: no row for stream %s in the duplicate windows table", d.Name())
		} else if want := text(d.Stream.Duplicates); cell != want {
			t.Errorf("docs/durability.md: stream %s's window is %q, want %q", d.Name(), cell, want)
		}
	}
	flat := strings.Join(strings.Fields(section), " ")
	for _, want := range []string{
		fmt.Sprintf("`--work-duplicates` (%v; %v to %v)", short(topology.DefaultWorkDuplicates), short(topology.MinWorkDuplicates), short(topology.MaxDuplicates)),
		fmt.Sprintf("`--journal-duplicates` (%v; %v to %v)", short(topology.DefaultJournalDuplicates), short(topology.MinJournalDuplicates), short(topology.MaxDuplicates)),
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("docs/durability.md: want %q", want)
		}
	}
}

// short writes d as a flag takes it: 30s, 1m, 24h.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
