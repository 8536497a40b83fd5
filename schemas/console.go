package schemas

import "fmt"

// Whoami is the answer to GET /v1/whoami: what the request's API key is,
// so a client (the dashboard) shows only what the key may use.
type Whoami struct {
	// Tenant is the tenant the key acts for.
	Tenant string `json:"tenant"`
	// Admin keys may use the fleet-wide views (every tenant's jobs and
	// dead letters, quotas, prices, the fleet); Approver keys may answer
	// their tenant's steps that wait for a person.
	Admin    bool `json:"admin"`
	Approver bool `json:"approver"`
	// KeyName is the key's name (absent when it has none); KeyPrefix its
	// public prefix, mk_<key id>, never the secret.
	KeyName   string `json:"key_name,omitempty"`
	KeyPrefix string `json:"key_prefix"`
}

// MaxReplaySeqs is the most dead letters one POST /v1/dlq/replay names.
const MaxReplaySeqs = 1000

// DLQReplayBody is the body of POST /v1/dlq/replay: the dead letters to
// replay, by their DLQ sequence (GET /v1/dlq's dlq_seq).
type DLQReplayBody struct {
	// Seqs are the dead letters' sequences, 1 to 1000 of them, each >= 1.
	Seqs []uint64 `json:"seqs" jsonschema:"minItems=1,maxItems=1000"`
}

// Check says what is wrong with b, if anything, and at which field (a
// JSON pointer): 1 to MaxReplaySeqs sequences, each at least 1, none
// twice. The API and the coordinators check every body with it.
func (b DLQReplayBody) Check() (field string, err error) {
	if len(b.Seqs) == 0 || len(b.Seqs) > MaxReplaySeqs {
		return "/seqs", fmt.Errorf("seqs must name 1 to %d dead letters (their dlq_seq), not %d", MaxReplaySeqs, len(b.Seqs))
	}
	seen := make(map[uint64]bool, len(b.Seqs))
	for i, seq := range b.Seqs {
		if seq == 0 {
			return fmt.Sprintf("/seqs/%d", i), fmt.Errorf("a dead letter's sequence is at least 1")
		}
		if seen[seq] {
			return fmt.Sprintf("/seqs/%d", i), fmt.Errorf("dead letter %d is named twice", seq)
		}
		seen[seq] = true
	}
	return "", nil
}

// DLQReplayResult is the answer to POST /v1/dlq/replay: each sequence
// asked, replayed, refused or failed, in the order asked.
type DLQReplayResult struct {
	// Replayed are the dead letters published to their original subjects
	// again and removed from the DLQ.
	Replayed []StoredDeadLetter `json:"replayed"`
	// Refused are those the replay's checks refused (bus.CheckReplay, as
	// maker dlq replay applies them): nothing published, the dead letter
	// kept.
	Refused []DLQReplayProblem `json:"refused"`
	// Failed are those that could not be replayed for another reason (no
	// such dead letter, its original gone, the bus).
	Failed []DLQReplayProblem `json:"failed"`
}

// DLQReplayProblem is a dead letter not replayed, with why.
type DLQReplayProblem struct {
	// Seq is the dead letter's DLQ sequence.
	Seq uint64 `json:"seq"`
	// Reason says why it was not replayed.
	Reason string `json:"reason"`
}
