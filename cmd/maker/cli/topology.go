package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// topologyCmd is the operator's handle on the fleet's streams and
// buckets: create them once, with the replicas the deployment needs,
// before any role starts; show what a server holds.
func topologyCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "topology",
		Short: "Create or show the fleet's NATS streams and buckets (an operator's command)",
		Long: `The fleet's topology (streams, shared consumers, KV buckets) is created once, by its
owners: coordinators (with their --replicas) or, ahead of any role, maker topology create.
Voters wait for it ("waiting for the fleet topology"); client commands only bind it.
Streams found with fewer replicas than asked for are raised, never lowered.
An existing stream's duplicate window changes only when maker topology create is given
--work-duplicates or --journal-duplicates, but for an older release's (2 minutes on the
work queues, 10 on the journal): the first coordinator or topology create that finds it
gives it its own. maker topology show lists them.`,
	})
	var (
		natsURL  string
		replicas int
		judge    bool
		asJSON   bool
		windows  windowFlags
	)
	create := &cobra.Command{
		Use:   "create",
		Short: "Create the fleet's streams, consumers and buckets (and the judge's), or raise their replicas and set their duplicate windows",
		Example: `  maker topology create --nats nats://n1:4222,nats://n2:4222,nats://n3:4222 --replicas 3
  maker topology create --judge=false
  maker topology create --work-duplicates 30s --journal-duplicates 1m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if replicas < 1 || replicas > 5 {
				return usagef("--replicas must be 1..5")
			}
			// One attempt creates every stream and bucket; on a loaded
			// server that can take longer than an attempt's 10 s, and
			// what it created stays, so the next attempt goes further.
			cfg := topology.Config{Replicas: replicas, StartupWait: 45 * time.Second}
			if err := windows.setGiven(cmd, &cfg); err != nil {
				return err
			}
			js, closeNC, err := connectJS(natsURL, "maker-topology", natsAuth(cmd.Context()))
			if err != nil {
				return err
			}
			defer closeNC()
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			cfg.Logger = e.logger(slog.LevelInfo)
			if _, err := topology.Ensure(ctx, js, cfg); err != nil {
				return fmt.Errorf("%s: %w", natsURL, err)
			}
			if judge {
				if _, err := topology.EnsureJudge(ctx, js, topology.JudgeConfig{Replicas: replicas, StartupWait: 45 * time.Second}); err != nil {
					return fmt.Errorf("%s: judge topology: %w", natsURL, err)
				}
			}
			return printTopology(ctx, e, js, judge, asJSON)
		},
	}
	natsFlag(create, &natsURL)
	create.Flags().IntVar(&replicas, "replicas", 1, "replicas of every stream and bucket (3 on a clustered nats-server); existing ones with fewer are raised")
	addWindowFlags(create, &windows, "given, existing streams take it too; not given, they keep theirs")
	create.Flags().BoolVar(&judge, "judge", true, "create the judge's (break-glass) topology too")
	create.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	show := &cobra.Command{
		Use:   "show",
		Short: "List the fleet's streams and buckets on a server, with their replicas, sizes and streams' duplicate windows",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			js, closeNC, err := connectJS(natsURL, "maker-topology", natsAuth(cmd.Context()))
			if err != nil {
				return err
			}
			defer closeNC()
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			return printTopology(ctx, e, js, true, asJSON)
		},
	}
	natsFlag(show, &natsURL)
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(create, show)
	return cmd
}

// topologyRow is one stream or bucket of `maker topology show`.
type topologyRow struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"` // stream or bucket
	Part     string `json:"part"` // fleet or judge
	Exists   bool   `json:"exists"`
	Replicas int    `json:"replicas,omitempty"`
	Storage  string `json:"storage,omitempty"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	// Duplicates is a stream's duplicate window ("" for a bucket, whose
	// writes carry no message id).
	Duplicates string `json:"duplicate_window,omitempty"`
}

// printTopology lists the default namespace's streams and buckets (the
// judge's when judge is set), present or not: every one the topology
// table declares for the fleet and the judge to create. The buckets a
// feature makes on its first write (retention policies, calibrations)
// are left out: their absence is normal.
func printTopology(ctx context.Context, e *env, js jetstream.JetStream, judge bool, asJSON bool) error {
	type item struct{ name, stream, kind, part string }
	var items []item
	for _, d := range topology.Table(bus.DefaultNamespace, topology.Config{}, topology.JudgeConfig{}) {
		part := "fleet"
		switch {
		case d.Kind == topology.Consumer || d.Creator == topology.Feature:
			continue
		case d.Creator == topology.Judge:
			if !judge {
				continue
			}
			part = "judge"
		}
		stream := d.Name()
		switch d.Kind {
		case topology.Bucket:
			stream = "KV_" + stream
		case topology.Objects:
			stream = "OBJ_" + stream
		}
		items = append(items, item{d.Name(), stream, d.Kind.String(), part})
	}
	rows := make([]topologyRow, 0, len(items))
	for _, it := range items {
		row := topologyRow{Name: it.name, Kind: it.kind, Part: it.part}
		s, err := js.Stream(ctx, it.stream)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
		case err != nil:
			return fmt.Errorf("%s %s: %w", it.kind, it.name, err)
		default:
			info := s.CachedInfo()
			row.Exists, row.Replicas, row.Storage = true, max(info.Config.Replicas, 1), info.Config.Storage.String()
			row.Messages, row.Bytes = info.State.Msgs, info.State.Bytes
			if it.kind == topology.Stream.String() {
				row.Duplicates = info.Config.Duplicates.String()
			}
		}
		rows = append(rows, row)
	}
	if asJSON {
		return writeJSON(e.stdout, rows)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tPART\tREPLICAS\tSTORAGE\tMESSAGES\tBYTES\tDUPLICATE WINDOW")
	for _, r := range rows {
		if !r.Exists {
			fmt.Fprintf(tw, "%s\t%s\t%s\tmissing\t-\t-\t-\t-\n", r.Name, r.Kind, r.Part)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", r.Name, r.Kind, r.Part, r.Replicas, r.Storage, r.Messages, r.Bytes, cmp.Or(r.Duplicates, "-"))
	}
	return tw.Flush()
}
