package schemas_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// Every rule of the durable-job kinds' Validate methods, one failing case
// each (TestValidateRules covers the job's own kinds).
func TestValidateDurableRules(t *testing.T) {
	t.Parallel()
	const (
		record  = schemas.KindJobRecord
		lease   = schemas.KindLease
		entry   = schemas.KindJournalEntry
		ckpt    = schemas.KindCheckpoint
		deadLtr = schemas.KindDeadLetter
	)
	type (
		Rec = *schemas.JobRecord
		L   = *schemas.Lease
		E   = *schemas.JournalEntry
		C   = *schemas.Checkpoint
		DL  = *schemas.DeadLetter
	)
	tests := []struct {
		name string
		m    func(t *testing.T) schemas.Message
		want error
		msg  string
	}{
		{"record/kind", func(t *testing.T) schemas.Message { return mutate(t, record, func(r Rec) { r.Kind = "lease" }) }, schemas.ErrKind, `got "lease", want "job_record"`},
		{"record/version", func(t *testing.T) schemas.Message { return mutate(t, record, func(r Rec) { r.Version = 2 }) }, schemas.ErrVersion, "2"},
		{"record/tenant", func(t *testing.T) schemas.Message { return mutate(t, record, func(r Rec) { r.Tenant = "" }) }, schemas.ErrInvalid, `tenant ""`},
		{"record/job id", func(t *testing.T) schemas.Message { return mutate(t, record, func(r Rec) { r.JobID = "a.b" }) }, schemas.ErrInvalid, `job id "a.b"`},
		{"record/spec of another job", func(t *testing.T) schemas.Message {
			return mutate(t, record, func(r Rec) { r.Spec.JobID = "other" })
		}, schemas.ErrInvalid, "spec is job acme/other, not acme/hanoi-10-k3"},
		{"record/spec of another tenant", func(t *testing.T) schemas.Message {
			return mutate(t, record, func(r Rec) { r.Spec.Tenant = "beta" })
		}, schemas.ErrInvalid, "spec is job beta/hanoi-10-k3, not acme/hanoi-10-k3"},
		{"record/spec invalid", func(t *testing.T) schemas.Message { return mutate(t, record, func(r Rec) { r.Spec.K = 0 }) }, schemas.ErrInvalid, "k is missing"},
		{"record/spec kind", func(t *testing.T) schemas.Message {
			return mutate(t, record, func(r Rec) { r.Spec.Kind = "job_record" })
		}, schemas.ErrKind, `want "job_spec"`},
		{"record/control", func(t *testing.T) schemas.Message { return mutate(t, record, func(r Rec) { r.Control = "stop" }) }, schemas.ErrInvalid, `unknown control "stop"`},
		{"record/control empty", func(t *testing.T) schemas.Message { return mutate(t, record, func(r Rec) { r.Control = "" }) }, schemas.ErrInvalid, `unknown control ""`},
		{"record/control case", func(t *testing.T) schemas.Message { return mutate(t, record, func(r Rec) { r.Control = "Pause" }) }, schemas.ErrInvalid, `unknown control "Pause"`},
		{"record/state", func(t *testing.T) schemas.Message { return mutate(t, record, func(r Rec) { r.State = "halted" }) }, schemas.ErrInvalid, `unknown state "halted"`},
		{"record/state empty", func(t *testing.T) schemas.Message { return mutate(t, record, func(r Rec) { r.State = "" }) }, schemas.ErrInvalid, `unknown state ""`},

		{"lease/kind", func(t *testing.T) schemas.Message { return mutate(t, lease, func(l L) { l.Kind = "job_record" }) }, schemas.ErrKind, `want "lease"`},
		{"lease/version", func(t *testing.T) schemas.Message { return mutate(t, lease, func(l L) { l.Version = 0 }) }, schemas.ErrVersion, "0"},
		{"lease/tenant", func(t *testing.T) schemas.Message { return mutate(t, lease, func(l L) { l.Tenant = "Acme" }) }, schemas.ErrInvalid, `tenant "Acme"`},
		{"lease/job id", func(t *testing.T) schemas.Message { return mutate(t, lease, func(l L) { l.JobID = "" }) }, schemas.ErrInvalid, `job id ""`},
		{"lease/owner", func(t *testing.T) schemas.Message { return mutate(t, lease, func(l L) { l.Owner = "" }) }, schemas.ErrInvalid, "a lease needs an owner"},
		{"lease/token 0", func(t *testing.T) schemas.Message { return mutate(t, lease, func(l L) { l.Token = 0 }) }, schemas.ErrInvalid, "token must be between 1 and 1099511627775, got 0"},
		{"lease/token negative", func(t *testing.T) schemas.Message { return mutate(t, lease, func(l L) { l.Token = -3 }) }, schemas.ErrInvalid, "got -3"},
		{"lease/token max", func(t *testing.T) schemas.Message {
			return mutate(t, lease, func(l L) { l.Token = schemas.MaxLeaseToken })
		}, schemas.ErrInvalid, "got 1099511627776"},

		{"entry/kind", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Kind = "checkpoint" }) }, schemas.ErrKind, `want "journal_entry"`},
		{"entry/tenant", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Tenant = "a_b" }) }, schemas.ErrInvalid, `tenant "a_b"`},
		{"entry/job id", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.JobID = "-j" }) }, schemas.ErrInvalid, `job id "-j"`},
		{"entry/token", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Token = 0 }) }, schemas.ErrInvalid, "an entry needs its writer's token (>= 1) and owner"},
		{"entry/owner", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Owner = "" }) }, schemas.ErrInvalid, "an entry needs its writer's token (>= 1) and owner"},
		{"entry/takeover without owner", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { *e = takeoverOf(e); e.Owner = "" })
		}, schemas.ErrInvalid, "an entry needs its writer's token (>= 1) and owner"},
		{"entry/step", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Step = -1 }) }, schemas.ErrInvalid, "step must be >= 0, got -1"},
		{"entry/takeover step", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { *e = takeoverOf(e); e.Step = -2 })
		}, schemas.ErrInvalid, "step must be >= 0, got -2"},
		{"entry/epoch", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Epoch = -1 }) }, schemas.ErrInvalid, "epoch must be >= 0, got -1"},
		{"entry/work prompt tokens", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { e.Work.PromptTokens = -1 })
		}, schemas.ErrInvalid, "work.prompt_tokens must be >= 0, got -1"},
		{"entry/work late", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Work.LateSamples = -4 }) }, schemas.ErrInvalid, "work.late_samples must be >= 0, got -4"},
		{"entry/work malformed", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { e.Work.MalformedMessages = -1 })
		}, schemas.ErrInvalid, "work.malformed_messages must be >= 0, got -1"},
		{"entry/type", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Type = "vote" }) }, schemas.ErrInvalid, `unknown type "vote"`},
		{"entry/type empty", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Type = "" }) }, schemas.ErrInvalid, `unknown type ""`},
		{"entry/vote key", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.VoteKey = "" }) }, schemas.ErrInvalid, "a decision needs a vote_key"},
		{"entry/votes 0", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Votes = 0 }) }, schemas.ErrInvalid, "a decision needs votes >= lead >= 1, got votes 0 lead 3"},
		{"entry/lead 0", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Lead = 0 }) }, schemas.ErrInvalid, "got votes 3 lead 0"},
		{"entry/lead over votes", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Lead = 4 }) }, schemas.ErrInvalid, "got votes 3 lead 4"},
		{"entry/valid under votes", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { e.Valid, e.Counted = 2, 3 })
		}, schemas.ErrInvalid, "counted (3) must be valid (2, >= votes 3) plus red_flagged (1)"},
		{"entry/counted", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Counted = 5 }) }, schemas.ErrInvalid, "counted (5) must be valid (3, >= votes 3) plus red_flagged (1)"},
		{"entry/red flagged negative", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { e.RedFlagged, e.Counted, e.RedFlags = -1, 2, nil })
		}, schemas.ErrInvalid, "plus red_flagged (-1)"},
		{"entry/red flags sum", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { e.RedFlags = map[string]int{"parse": 2} })
		}, schemas.ErrInvalid, "red_flags add up to 2, not red_flagged 1"},
		{"entry/red flags missing", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.RedFlags = nil }) }, schemas.ErrInvalid, "red_flags add up to 0, not red_flagged 1"},
		{"entry/red flag negative", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { e.RedFlags = map[string]int{"parse": 2, "length": -1} })
		}, schemas.ErrInvalid, `red_flags["length"] = -1`},
		{"entry/red flag without reason", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { e.RedFlags = map[string]int{"": 1} })
		}, schemas.ErrInvalid, `red_flags[""] = 1`},
		{"entry/escalation rung", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { *e = escalationOf(e, schemas.RungPerson) })
		}, schemas.ErrInvalid, `an escalation entry climbs to stronger_model or panel, got "person"`},
		{"entry/escalation without rung", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { *e = escalationOf(e, "") })
		}, schemas.ErrInvalid, `got ""`},
		{"entry/escalation without prior", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { *e = escalationOf(e, schemas.RungPanel); e.Prior = nil })
		}, schemas.ErrInvalid, "an escalation entry needs the tallies of the rungs below (prior)"},
		{"entry/escalation prior counts", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { *e = escalationOf(e, schemas.RungPanel); e.Prior[0].Valid = 9 })
		}, schemas.ErrInvalid, "prior rung own_model: counted (5) must be valid (9) plus red_flagged (1)"},
		{"entry/escalation prior rung", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { *e = escalationOf(e, schemas.RungPanel); e.Prior[0].Rung = "panel" })
		}, schemas.ErrInvalid, `prior rung 0 is own_model or stronger_model, got "panel"`},
		{"entry/escalation prior tally", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) { *e = escalationOf(e, schemas.RungPanel); e.Prior[0].Tally[1].Votes = -2 })
		}, schemas.ErrInvalid, "tally[1].votes must be >= 0, got -2"},
		{"entry/end counts", func(t *testing.T) schemas.Message {
			return mutate(t, entry, func(e E) {
				*e = takeoverOf(e)
				e.Type, e.State, e.Counted, e.Valid = schemas.EntryEnd, schemas.StateNoConsensus, 5, 4
			})
		}, schemas.ErrInvalid, "counted (5) must be valid (4) plus red_flagged (0)"},
		{"entry/tally", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.Tally[0].Votes = -1 }) }, schemas.ErrInvalid, "tally[0].votes must be >= 0, got -1"},

		{"checkpoint/kind", func(t *testing.T) schemas.Message { return mutate(t, ckpt, func(c C) { c.Kind = "journal_entry" }) }, schemas.ErrKind, `want "checkpoint"`},
		{"checkpoint/tenant", func(t *testing.T) schemas.Message { return mutate(t, ckpt, func(c C) { c.Tenant = "" }) }, schemas.ErrInvalid, `tenant ""`},
		{"checkpoint/job id", func(t *testing.T) schemas.Message { return mutate(t, ckpt, func(c C) { c.JobID = "x y" }) }, schemas.ErrInvalid, `job id "x y"`},
		{"checkpoint/token", func(t *testing.T) schemas.Message { return mutate(t, ckpt, func(c C) { c.Token = 0 }) }, schemas.ErrInvalid, "token must be >= 1"},
		{"checkpoint/state broken", func(t *testing.T) schemas.Message {
			return mutate(t, ckpt, func(c C) { c.State = json.RawMessage(`{"pegs":`) })
		}, schemas.ErrInvalid, "a checkpoint needs a JSON state and a trace"},
		{"checkpoint/state missing", func(t *testing.T) schemas.Message { return mutate(t, ckpt, func(c C) { c.State = nil }) }, schemas.ErrInvalid, "a checkpoint needs a JSON state and a trace"},
		{"checkpoint/trace missing", func(t *testing.T) schemas.Message { return mutate(t, ckpt, func(c C) { c.Trace = nil }) }, schemas.ErrInvalid, "a checkpoint needs a JSON state and a trace"},
		{"checkpoint/step", func(t *testing.T) schemas.Message { return mutate(t, ckpt, func(c C) { c.Step = -1 }) }, schemas.ErrInvalid, "step must be >= 0, got -1"},
		{"checkpoint/progress steps", func(t *testing.T) schemas.Message { return mutate(t, ckpt, func(c C) { c.Progress.Steps = -1 }) }, schemas.ErrInvalid, "progress.steps must be >= 0, got -1"},
		{"checkpoint/progress samples", func(t *testing.T) schemas.Message {
			return mutate(t, ckpt, func(c C) { c.Progress.Samples = -1 })
		}, schemas.ErrInvalid, "progress.samples must be >= 0, got -1"},
		{"checkpoint/progress votes", func(t *testing.T) schemas.Message { return mutate(t, ckpt, func(c C) { c.Progress.Votes = -1 }) }, schemas.ErrInvalid, "progress.votes must be >= 0, got -1"},
		{"checkpoint/progress red flagged", func(t *testing.T) schemas.Message {
			return mutate(t, ckpt, func(c C) { c.Progress.RedFlagged = -1 })
		}, schemas.ErrInvalid, "progress.red_flagged must be >= 0, got -1"},
		{"checkpoint/progress errors", func(t *testing.T) schemas.Message {
			return mutate(t, ckpt, func(c C) { c.Progress.Errors = -1 })
		}, schemas.ErrInvalid, "progress.errors must be >= 0, got -1"},

		{"checkpoint/stronger tokens", func(t *testing.T) schemas.Message {
			return mutate(t, ckpt, func(c C) { c.Progress.StrongerCompletionTokens = c.Progress.CompletionTokens + 1 })
		}, schemas.ErrInvalid, "the stronger model's tokens"},
		{"checkpoint/rung", func(t *testing.T) schemas.Message {
			return mutate(t, ckpt, func(c C) { c.Rung, c.Prior = "own_model", testPrior() })
		}, schemas.ErrInvalid, `the open step's rung is stronger_model or panel, got "own_model"`},
		{"checkpoint/rung without prior", func(t *testing.T) schemas.Message {
			return mutate(t, ckpt, func(c C) { c.Rung = schemas.RungStrongerModel })
		}, schemas.ErrInvalid, "the open step on rung stronger_model needs the tallies of the rungs below (prior)"},
		{"checkpoint/prior without rung", func(t *testing.T) schemas.Message {
			return mutate(t, ckpt, func(c C) { c.Prior = testPrior() })
		}, schemas.ErrInvalid, "prior rungs without the rung above them"},
		{"checkpoint/prior counts", func(t *testing.T) schemas.Message {
			return mutate(t, ckpt, func(c C) { c.Rung, c.Prior = schemas.RungPanel, testPrior(); c.Prior[0].RedFlagged = -1 })
		}, schemas.ErrInvalid, "prior rung own_model: counted (5) must be valid (4) plus red_flagged (-1)"},

		{"dead letter/kind", func(t *testing.T) schemas.Message { return mutate(t, deadLtr, func(d DL) { d.Kind = "" }) }, schemas.ErrKind, `got "", want "dead_letter"`},
		{"dead letter/version", func(t *testing.T) schemas.Message { return mutate(t, deadLtr, func(d DL) { d.Version = 3 }) }, schemas.ErrVersion, "3"},
		{"dead letter/stream", func(t *testing.T) schemas.Message { return mutate(t, deadLtr, func(d DL) { d.Stream = "" }) }, schemas.ErrInvalid, "a dead letter needs its stream, subject and reason"},
		{"dead letter/subject", func(t *testing.T) schemas.Message { return mutate(t, deadLtr, func(d DL) { d.Subject = "" }) }, schemas.ErrInvalid, "a dead letter needs its stream, subject and reason"},
		{"dead letter/reason", func(t *testing.T) schemas.Message { return mutate(t, deadLtr, func(d DL) { d.Reason = "" }) }, schemas.ErrInvalid, "a dead letter needs its stream, subject and reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := tt.m(t)
			err := m.Validate()
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Validate = %v, want %v containing %q", err, tt.want, tt.msg)
			}
			// Encode refuses what Validate refuses.
			if _, encErr := schemas.Encode(m); encErr == nil || encErr.Error() != err.Error() {
				t.Errorf("Encode = %v, want %v", encErr, err)
			}
		})
	}
}

// takeoverOf returns e as a takeover entry: no decision fields.
func takeoverOf(e *schemas.JournalEntry) schemas.JournalEntry {
	return schemas.JournalEntry{
		Header: e.Header, Tenant: e.Tenant, JobID: e.JobID, Type: schemas.EntryTakeover,
		Token: e.Token, Owner: e.Owner, Step: e.Step, Work: e.Work, At: e.At,
	}
}

// escalationOf returns e as an escalation entry climbing to rung above the
// job's own model.
func escalationOf(e *schemas.JournalEntry, rung string) schemas.JournalEntry {
	return schemas.JournalEntry{
		Header: e.Header, Tenant: e.Tenant, JobID: e.JobID, Type: schemas.EntryEscalation,
		Token: e.Token, Owner: e.Owner, Step: e.Step, Epoch: e.Epoch, Rung: rung, Prior: testPrior(), Work: e.Work, At: e.At,
	}
}

// testPrior is an own model's rung that drew 5 samples without a lead.
func testPrior() []schemas.RungTally {
	return []schemas.RungTally{{
		Rung: schemas.RungOwnModel, Counted: 5, Valid: 4, RedFlagged: 1, RedFlags: map[string]int{"parse": 1},
		Tally: []schemas.TallyEntry{{VoteKey: "a", Votes: 2}, {VoteKey: "b", Votes: 2}},
	}}
}

// The durable kinds' valid variants beyond the golden files: what a
// coordinator writes in practice must pass Validate, Encode and Decode.
func TestValidateDurableVariants(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		m    func(t *testing.T) schemas.Message
	}{
		{"takeover without decision fields", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindJournalEntry, func(e *schemas.JournalEntry) { *e = takeoverOf(e) })
		}},
		{"decision without red flags", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindJournalEntry, func(e *schemas.JournalEntry) {
				e.RedFlagged, e.RedFlags, e.Counted, e.Tally, e.Work = 0, nil, e.Valid, nil, schemas.Delta{}
			})
		}},
		{"decision at step 0, epoch 0", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindJournalEntry, func(e *schemas.JournalEntry) { e.Step, e.Epoch = 0, 0 })
		}},
		{"escalation to the stronger model", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindJournalEntry, func(e *schemas.JournalEntry) { *e = escalationOf(e, schemas.RungStrongerModel) })
		}},
		{"escalation to the panel", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindJournalEntry, func(e *schemas.JournalEntry) {
				*e = escalationOf(e, schemas.RungPanel)
				e.Prior = append(e.Prior, schemas.RungTally{Rung: schemas.RungStrongerModel, Counted: 3, Valid: 3})
			})
		}},
		{"checkpoint of a step on the stronger model's rung", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindCheckpoint, func(c *schemas.Checkpoint) { c.Rung, c.Prior = schemas.RungStrongerModel, testPrior() })
		}},
		{"lease token 1", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindLease, func(l *schemas.Lease) { l.Token = 1 })
		}},
		{"lease largest token", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindLease, func(l *schemas.Lease) { l.Token = schemas.MaxLeaseToken - 1 })
		}},
		{"record of every control and state", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindJobRecord, func(r *schemas.JobRecord) {
				r.Control, r.State, r.Finished = schemas.ControlCancel, schemas.StateCancelled, true
			})
		}},
		{"record paused", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindJobRecord, func(r *schemas.JobRecord) { r.Control, r.State = schemas.ControlPause, schemas.StatePaused })
		}},
		{"record queued", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindJobRecord, func(r *schemas.JobRecord) { r.State = schemas.StateQueued })
		}},
		{"checkpoint at the start", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindCheckpoint, func(c *schemas.Checkpoint) { c.JournalSeq, c.Step = 0, 0 })
		}},
		{"dead letter without payload", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindDeadLetter, func(d *schemas.DeadLetter) { d.Data, d.Consumer = nil, "" })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := tt.m(t)
			if err := m.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			data, err := schemas.Encode(m)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			back := newMessage(t, m.MessageKind())
			if err := schemas.Decode(data, back); err != nil {
				t.Errorf("Decode(Encode(m)): %v", err)
			}
			if err := validateSchema(t, m.MessageKind(), data); err != nil {
				t.Errorf("committed JSON Schema refuses it: %v", err)
			}
		})
	}
}

// TestCheckpointProgress: a checkpoint as a coordinator writes it mid-job
// passes Validate, round-trips, and is valid under the committed schema.
func TestCheckpointProgress(t *testing.T) {
	t.Parallel()
	c := decodeGolden(t, schemas.KindCheckpoint).(*schemas.Checkpoint)
	c.Progress = schemas.Progress{Figures: schemas.Figures{Steps: 1000, Samples: 2000, Votes: 1990, RedFlagged: 10, RedFlags: map[string]int64{"parse": 10}}, StartedAt: time.Now().UTC()}
	data, err := schemas.Encode(c)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	var back schemas.Checkpoint
	if err := schemas.Decode(data, &back); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if back.Progress.Steps != 1000 || back.Progress.RedFlags["parse"] != 10 {
		t.Errorf("progress came back as %+v", back.Progress)
	}
	if err := validateSchema(t, schemas.KindCheckpoint, data); err != nil {
		t.Errorf("committed JSON Schema refuses a checkpoint: %v", err)
	}
}
