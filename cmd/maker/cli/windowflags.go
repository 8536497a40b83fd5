package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/topology"
)

// windowFlags are the duplicate windows of the streams a command creates
// (topology.Config.WorkDuplicates and JournalDuplicates; docs/durability.md
// "Duplicate windows"): coordinator, topology create, run, bench, up.
type windowFlags struct{ work, journal time.Duration }

// The flags' names.
const (
	workDuplicatesFlag    = "work-duplicates"
	journalDuplicatesFlag = "journal-duplicates"
)

// addWindowFlags adds --work-duplicates and --journal-duplicates; existing
// says what streams that exist do with them.
func addWindowFlags(cmd *cobra.Command, w *windowFlags, existing string) {
	fl := cmd.Flags()
	fl.DurationVar(&w.work, workDuplicatesFlag, topology.DefaultWorkDuplicates, fmt.Sprintf(
		"duplicate window of the sample request and result streams: the server keeps each result's message id this long, in memory; it must outlast a voter's 10s of retries; a coordinator also recognises answers of the steps it decided this long, so they are not billed twice (%v to %v); %s",
		topology.MinWorkDuplicates, topology.MaxDuplicates, existing))
	fl.DurationVar(&w.journal, journalDuplicatesFlag, topology.DefaultJournalDuplicates, fmt.Sprintf(
		"duplicate window of the journal stream; appends are fenced, so it only spares a retried append a read (%v to %v); %s",
		topology.MinJournalDuplicates, topology.MaxDuplicates, existing))
}

// windowsKept is what a role that creates the topology does with the
// windows of streams that exist.
const windowsKept = "existing streams keep theirs (maker topology create sets them)"

// set checks the windows and puts them in cfg.
func (w windowFlags) set(cfg *topology.Config) error {
	if err := topology.CheckDuplicates(w.work, w.journal); err != nil {
		return usageError{fmt.Errorf("--%s, --%s: %w", workDuplicatesFlag, journalDuplicatesFlag, err)}
	}
	cfg.WorkDuplicates, cfg.JournalDuplicates = w.work, w.journal
	return nil
}

// setGiven is set for maker topology create: only the flags given are
// put in cfg, and existing streams take them too (SetDuplicates); a
// window not given is the default for new streams and leaves existing
// ones as they are.
func (w windowFlags) setGiven(cmd *cobra.Command, cfg *topology.Config) error {
	if err := w.set(cfg); err != nil {
		return err
	}
	if !cmd.Flags().Changed(workDuplicatesFlag) {
		cfg.WorkDuplicates = 0
	}
	if !cmd.Flags().Changed(journalDuplicatesFlag) {
		cfg.JournalDuplicates = 0
	}
	cfg.SetDuplicates = cfg.WorkDuplicates != 0 || cfg.JournalDuplicates != 0
	return nil
}
