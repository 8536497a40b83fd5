package schemas_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// Every rule of the arbitration kinds' Validate, one failing case each.
func TestValidateArbitrationRules(t *testing.T) {
	t.Parallel()
	const (
		req  = schemas.KindArbitrationRequest
		resp = schemas.KindArbitrationResponse
		appr = schemas.KindBreakGlassApproval
		aud  = schemas.KindBreakGlassAudit
	)
	type (
		Rq = *schemas.ArbitrationRequest
		Rs = *schemas.ArbitrationResponse
		Ap = *schemas.BreakGlassApproval
		Au = *schemas.BreakGlassAudit
	)
	// many returns n candidates and an own-model rung that drew them.
	many := func(n int) ([]schemas.TallyEntry, []schemas.RungTally) {
		rung := schemas.RungTally{Rung: schemas.RungOwnModel}
		for i := range n {
			rung.Tally = append(rung.Tally, schemas.TallyEntry{VoteKey: fmt.Sprintf(`{"move":%d}`, i), Votes: 1})
		}
		rung.Counted, rung.Valid = n, n
		cands, _ := schemas.MergeRungs([]schemas.RungTally{rung})
		return cands, []schemas.RungTally{rung}
	}
	// arbitration returns the golden request for an approval of it.
	arbitration := func(t *testing.T) *schemas.ArbitrationRequest {
		return decodeGolden(t, req).(*schemas.ArbitrationRequest)
	}
	tests := []struct {
		name string
		m    func(t *testing.T) schemas.Message
		msg  string
	}{
		{"request/kind", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Kind = resp }) }, `want "arbitration_request"`},
		{"request/tenant", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Tenant = "A" }) }, `tenant "A"`},
		{"request/job id", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.JobID = "a/b" }) }, `job id "a/b"`},
		{"request/step", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Step = -1 }) }, "step must be >= 0, got -1"},
		{"request/samples", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Samples = -1 }) }, "samples must be >= 0, got -1"},
		{"request/id of another step", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Step = 732 }) }, "is not the step's"},
		{"request/id of another job", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.JobID = "other" }) }, "is not the step's"},
		{"request/id of another tenant", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Tenant = "beta" }) }, "is not the step's"},
		{"request/task", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Task = "Hanoi" }) }, `task "Hanoi" is not a task name`},
		{"request/k 0", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.K = 0 }) }, "k must be between 1 and 1000, got 0"},
		{"request/k over", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.K = schemas.MaxK + 1 }) }, "got 1001"},
		{"request/state empty", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.State = "" }) }, "state must be JSON text"},
		{"request/state broken", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.State = `{"pegs":` }) }, "state must be JSON text"},
		{"request/state huge", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.State = `"` + strings.Repeat("x", schemas.MaxArbitrationStateBytes) + `"` })
		}, "over the 65536-byte limit"},
		{"request/min confidence 0", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.MinConfidence = 0 }) }, "min_confidence must be in (0, 1], got 0"},
		{"request/min confidence over 1", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.MinConfidence = 1.01 }) }, "got 1.01"},
		{"request/min confidence NaN", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.MinConfidence = math.NaN() })
		}, "got NaN"},
		{"request/no candidates", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Candidates = nil }) }, "candidates holds 0 entries, want 1 to 64"},
		{"request/too many candidates", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) {
				r.Candidates, r.Rungs = many(schemas.MaxArbitrationCandidates + 1)
				r.Samples = r.Rungs[0].Counted
			})
		}, "candidates holds 65 entries"},
		{"request/empty key", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Candidates[1].VoteKey = "" }) }, "candidates[1].vote_key is empty"},
		{"request/huge key", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Candidates[0].VoteKey = strings.Repeat("k", schemas.MaxVoteKeyBytes+1) })
		}, "candidates[0].vote_key is 8193 bytes, over the 8192-byte limit"},
		{"request/key not UTF-8", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Candidates[0].VoteKey = "\xff" })
		}, "is not UTF-8"},
		{"request/key with a line break", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Candidates[2].VoteKey = "a\ncandidate 9 (votes 99): b" })
		}, "candidates[2].vote_key holds a control character"},
		{"request/negative votes", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Candidates[2].Votes = -1 }) }, "tally[2].votes must be >= 0"},
		{"request/no rungs", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Rungs = nil }) }, "rungs must start with own_model"},
		{"request/stronger first", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Rungs[0], r.Rungs[1] = r.Rungs[1], r.Rungs[0] })
		}, "rungs must start with own_model"},
		{"request/three rungs", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Rungs = append(r.Rungs, r.Rungs[1]) })
		}, "rungs are own_model, then stronger_model at most"},
		{"request/own model twice", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Rungs[1] = r.Rungs[0] })
		}, "rungs are own_model, then stronger_model at most"},
		{"request/rung counts", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Rungs[0].Valid = 90 }) }, "counted (100) must be valid (90) plus red_flagged (4)"},
		{"request/rung over the sample limit", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Rungs[0].Counted, r.Rungs[0].Valid = schemas.MaxSamplesLimit+4, schemas.MaxSamplesLimit })
		}, "rung own_model counted 100004 samples, over 100000"},
		{"request/rung tally too long", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { _, rungs := many(schemas.MaxArbitrationCandidates + 1); r.Rungs[1].Tally = rungs[0].Tally })
		}, "rung stronger_model's tally holds 65 entries"},
		{"request/rung key twice", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Rungs[1].Tally[1].VoteKey = r.Rungs[1].Tally[0].VoteKey })
		}, "rung stronger_model's tally names a vote key twice"},
		{"request/rung votes overflow", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Rungs[1].Tally[0].Votes = math.MaxInt })
		}, "votes for one key, over 100000"},
		{"request/rung red flags", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Rungs[0].RedFlags["parse"] = -4 })
		}, `red_flags["parse"] must be >= 0`},
		{"request/samples not the rungs'", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Samples = 109 }) }, "samples (109) must be what the rungs counted (110)"},
		{"request/candidate no rung drew", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Candidates[2].VoteKey = `{"move":[0,0,0]}` })
		}, "candidates must be the rungs' tallies merged"},
		{"request/candidates out of order", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Candidates[0], r.Candidates[1] = r.Candidates[1], r.Candidates[0] })
		}, "candidates must be the rungs' tallies merged"},
		{"request/votes not the rungs'", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Candidates[0].Votes = 50 }) }, "candidates must be the rungs' tallies merged"},

		{"response/kind", func(t *testing.T) schemas.Message { return mutate(t, resp, func(r Rs) { r.Kind = req }) }, `want "arbitration_response"`},
		{"response/tenant", func(t *testing.T) schemas.Message { return mutate(t, resp, func(r Rs) { r.Tenant = "" }) }, `tenant ""`},
		{"response/step", func(t *testing.T) schemas.Message { return mutate(t, resp, func(r Rs) { r.Step = -1 }) }, "step must be >= 0"},
		{"response/id of another step", func(t *testing.T) schemas.Message { return mutate(t, resp, func(r Rs) { r.Step = 1 }) }, "is not the step's"},
		{"response/unknown outcome", func(t *testing.T) schemas.Message { return mutate(t, resp, func(r Rs) { r.Outcome = "approved" }) }, `unknown outcome "approved"`},
		{"response/held with a decision", func(t *testing.T) schemas.Message {
			return mutate(t, resp, func(r Rs) { r.Outcome, r.Reason = schemas.BreakGlassHeld, "over $2.00" })
		}, "a held response has a reason and no decision yet"},
		{"response/held without reason", func(t *testing.T) schemas.Message {
			return mutate(t, resp, func(r Rs) { r.Outcome, r.Decision = schemas.BreakGlassHeld, nil })
		}, "a held response has a reason and no decision yet"},
		{"response/final without decision", func(t *testing.T) schemas.Message {
			return mutate(t, resp, func(r Rs) { r.Outcome, r.Decision = schemas.BreakGlassRefused, nil })
		}, "a refused response has a decision"},
		{"response/final with its own reason", func(t *testing.T) schemas.Message { return mutate(t, resp, func(r Rs) { r.Reason = "extra" }) }, "its reason is the decision's"},
		{"response/invalid decision", func(t *testing.T) schemas.Message { return mutate(t, resp, func(r Rs) { r.Decision.VoteKey = "" }) }, "decision: schemas: invalid message: arbiter_decision: a decided arbiter decision needs a vote_key"},
		{"response/decision of another step", func(t *testing.T) schemas.Message { return mutate(t, resp, func(r Rs) { r.Decision.Step = 1 }) }, "must be the response's"},
		{"response/decision of another request", func(t *testing.T) schemas.Message {
			return mutate(t, resp, func(r Rs) { r.Decision.RequestID = "person-731" })
		}, "must be the response's"},
		{"response/decided when failed", func(t *testing.T) schemas.Message {
			return mutate(t, resp, func(r Rs) { r.Outcome = schemas.BreakGlassFailed })
		}, "not a failed one"},
		{"response/decision cost", func(t *testing.T) schemas.Message { return mutate(t, resp, func(r Rs) { r.Decision.CostUSD = 0.5 }) }, "must be cost.actual_usd"},
		{"response/negative cost", func(t *testing.T) schemas.Message { return mutate(t, resp, func(r Rs) { r.Cost.EstimateUSD = -1 }) }, "cost.estimate_usd must be a finite number >= 0"},
		{"response/negative member tokens", func(t *testing.T) schemas.Message {
			return mutate(t, resp, func(r Rs) { r.Members[0].PromptTokens = -1 })
		}, "members[0]"},

		{"approval/both requests", func(t *testing.T) schemas.Message {
			return mutate(t, appr, func(a Ap) { a.Arbitration = arbitration(t) })
		}, "an approval holds exactly one of request and arbitration"},
		{"approval/no request", func(t *testing.T) schemas.Message { return mutate(t, appr, func(a Ap) { a.Request = nil }) }, "exactly one of"},
		{"approval/invalid arbitration", func(t *testing.T) schemas.Message {
			return mutate(t, appr, func(a Ap) {
				a.Request, a.Arbitration = nil, arbitration(t)
				a.Arbitration.K = 0
			})
		}, "k must be between 1 and 1000, got 0"},
		{"approval/arbitration's session is its job", func(t *testing.T) schemas.Message {
			return mutate(t, appr, func(a Ap) {
				a.Request, a.Arbitration = nil, arbitration(t)
				a.RequestID, a.Tenant = a.Arbitration.RequestID, a.Arbitration.Tenant
			})
		}, "must match the held request's"},
		{"audit/request kind", func(t *testing.T) schemas.Message { return mutate(t, aud, func(a Au) { a.RequestKind = "job_spec" }) }, `request_kind "job_spec" is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := tt.m(t)
			err := m.Validate()
			want := schemas.ErrInvalid
			if strings.HasSuffix(tt.name, "/kind") {
				want = schemas.ErrKind
			}
			if !errors.Is(err, want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Validate = %v, want %v containing %q", err, want, tt.msg)
			}
			if _, encErr := schemas.Encode(m); encErr == nil || encErr.Error() != err.Error() {
				t.Errorf("Encode = %v, want %v", encErr, err)
			}
		})
	}
}

// The variants the rules allow: a request of the own model's rung alone,
// a held response, an approval holding an arbitration.
func TestValidateArbitrationVariants(t *testing.T) {
	t.Parallel()
	r := decodeGolden(t, schemas.KindArbitrationRequest).(*schemas.ArbitrationRequest)
	r.Rungs = r.Rungs[:1]
	r.Candidates, r.Samples = schemas.MergeRungs(r.Rungs)
	if err := r.Validate(); err != nil {
		t.Errorf("own model only: %v", err)
	}
	held := decodeGolden(t, schemas.KindArbitrationResponse).(*schemas.ArbitrationResponse)
	held.Outcome, held.Reason, held.Decision = schemas.BreakGlassHeld, "over $2.00: held", nil
	if err := held.Validate(); err != nil {
		t.Errorf("held: %v", err)
	}
	unsure := decodeGolden(t, schemas.KindArbitrationResponse).(*schemas.ArbitrationResponse)
	unsure.Outcome = schemas.BreakGlassDegraded
	unsure.Decision.Outcome, unsure.Decision.VoteKey = schemas.ArbiterNeedsHuman, ""
	if err := unsure.Validate(); err != nil {
		t.Errorf("degraded, needs_human: %v", err)
	}
	a := decodeGolden(t, schemas.KindBreakGlassApproval).(*schemas.BreakGlassApproval)
	arb := decodeGolden(t, schemas.KindArbitrationRequest).(*schemas.ArbitrationRequest)
	a.Request, a.Arbitration = nil, arb
	a.RequestID, a.Tenant, a.Session = arb.RequestID, arb.Tenant, arb.JobID
	if err := a.Validate(); err != nil {
		t.Errorf("approval of an arbitration: %v", err)
	}
}

func TestArbitrationRequestID(t *testing.T) {
	t.Parallel()
	id := schemas.ArbitrationRequestID("acme", "hanoi-10-k3", 731)
	if id != "arbitration-b65a9cc926c109637e22352bc5939f95" || schemas.ValidJobID(id) != nil {
		t.Errorf("id %q: want the golden request's, a valid request id", id)
	}
	// Another tenant, job or step is another id, even where the three
	// would print alike.
	seen := map[string]bool{id: true}
	for _, other := range []string{
		schemas.ArbitrationRequestID("beta", "hanoi-10-k3", 731),
		schemas.ArbitrationRequestID("acme", "hanoi-10-k4", 731),
		schemas.ArbitrationRequestID("acme", "hanoi-10-k3", 73),
		schemas.ArbitrationRequestID("acme", "hanoi-10-k31", 1),
	} {
		if seen[other] {
			t.Errorf("id %q repeats", other)
		}
		seen[other] = true
	}
}

func TestMergeRungs(t *testing.T) {
	t.Parallel()
	own := schemas.RungTally{Rung: schemas.RungOwnModel, Counted: 12, Valid: 10, RedFlagged: 2,
		Tally: []schemas.TallyEntry{{VoteKey: "b", Votes: 5}, {VoteKey: "a", Votes: 3}, {VoteKey: "c", Votes: 2}}}
	stronger := schemas.RungTally{Rung: schemas.RungStrongerModel, Counted: 6, Valid: 6,
		Tally: []schemas.TallyEntry{{VoteKey: "a", Votes: 4}, {VoteKey: "d", Votes: 2}}}
	cands, samples := schemas.MergeRungs([]schemas.RungTally{own, stronger})
	want := []schemas.TallyEntry{{VoteKey: "a", Votes: 7}, {VoteKey: "b", Votes: 5}, {VoteKey: "c", Votes: 2}, {VoteKey: "d", Votes: 2}}
	if !slices.Equal(cands, want) || samples != 18 {
		t.Errorf("MergeRungs = %v, %d; want %v, 18 (most votes first, ties by key)", cands, samples, want)
	}
	if cands, samples := schemas.MergeRungs(nil); len(cands) != 0 || cands == nil || samples != 0 {
		t.Errorf("MergeRungs(nil) = %#v, %d; want an empty list", cands, samples)
	}
}
