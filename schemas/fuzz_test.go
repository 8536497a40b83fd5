package schemas_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

func FuzzDecodeJobSpec(f *testing.F)       { fuzzDecode(f, schemas.KindJobSpec) }
func FuzzDecodeSampleRequest(f *testing.F) { fuzzDecode(f, schemas.KindSampleRequest) }
func FuzzDecodeSampleResult(f *testing.F)  { fuzzDecode(f, schemas.KindSampleResult) }
func FuzzDecodeStepDecided(f *testing.F)   { fuzzDecode(f, schemas.KindStepDecided) }
func FuzzDecodeJobStatus(f *testing.F)     { fuzzDecode(f, schemas.KindJobStatus) }
func FuzzDecodeJobReport(f *testing.F)     { fuzzDecode(f, schemas.KindJobReport) }
func FuzzDecodeBreakGlassRequest(f *testing.F) {
	fuzzDecode(f, schemas.KindBreakGlassRequest)
}
func FuzzDecodeBreakGlassResponse(f *testing.F) {
	fuzzDecode(f, schemas.KindBreakGlassResponse)
}
func FuzzDecodeBreakGlassAudit(f *testing.F) { fuzzDecode(f, schemas.KindBreakGlassAudit) }
func FuzzDecodeBreakGlassApproval(f *testing.F) {
	fuzzDecode(f, schemas.KindBreakGlassApproval)
}
func FuzzDecodeArbitrationRequest(f *testing.F) {
	fuzzDecode(f, schemas.KindArbitrationRequest)
}
func FuzzDecodeArbitrationResponse(f *testing.F) {
	fuzzDecode(f, schemas.KindArbitrationResponse)
}
func FuzzDecodeArbiterDecision(f *testing.F) { fuzzDecode(f, schemas.KindArbiterDecision) }

// seedEdits turn a golden message into more seeds, each by a list of
// old, new replacements: optional fields absent or null, other outcomes and
// states, time offsets, escapes, -0.
var seedEdits = map[string][][]string{
	schemas.KindJobSpec: {
		{`"temperature_rest": 0.1,`, ``},
		{`"p_estimate": 0.998,`, `"p_estimate": 0,`, `"valid_fraction": 0.99,`, `"valid_fraction": 0,`},
		{`"pricing": {"input_usd_per_mtok": 0.1, "output_usd_per_mtok": 0.4},`, `"pricing": null,`},
		{`"submitted_at": "2025-11-29T20:00:00Z"`, `"submitted_at": "2025-11-29T21:00:00.123456789+01:00"`},
		{`{"disks": 10}`, `{"disks": 10, "note": "<&>\u2028", "n": -0.0e0}`},
		{`"temperature_first": 0,`, `"temperature_first": -0,`},
	},
	schemas.KindSampleRequest: {
		{`"state": {`, `"state": {"prev": null, `},
		{`"state": {"pegs": [[10, 9, 8, 7, 6, 5, 4, 3, 2, 1], [], []]}`, `"state": "\u00e9\ud83d\ude00"`},
		{`"issued_at": "2025-11-29T20:00:00.512Z"`, `"issued_at": "0001-01-01T00:00:00Z"`},
		{`"token": "q3Yh0vJ2_kQ9mC1xZpL8aw"`, `"token": "q3Yh0vJ2_kQ9mC1xZpL8a\u0077"`},
	},
	schemas.KindSampleResult: {
		{`"outcome": "vote",`, `"outcome": "red_flag", "red_flag": "length",`, `"vote_key": "{`, `"detail": "{`},
		{`"outcome": "vote",`, `"outcome": "skipped", "red_flag": "",`, `"vote_key": "{\"move\":[1,0,1],\"next_state\":[[10,9,8,7,6,5,4,3,2],[1],[]]}"`, `"vote_key": ""`},
		{`"model": "gpt-4.1-mini",`, `"model": "", "detail": "\"quoted\" \\ \t",`},
		{`"token": "q3Yh0vJ2_kQ9mC1xZpL8aw",`, ``},
		{`"token": "q3Yh0vJ2_kQ9mC1xZpL8aw"`, `"token": "q3Yh0vJ2_kQ9mC1xZpL8a\u0077"`},
	},
	schemas.KindStepDecided: {
		{`"tally": [
    {"vote_key": "{\"move\":[1,0,1],\"next_state\":[[10,9,8,7,6,5,4,3,2],[1],[]]}", "votes": 4},
    {"vote_key": "{\"move\":[1,0,2],\"next_state\":[[10,9,8,7,6,5,4,3,2],[],[1]]}", "votes": 1}
  ],`, `"tally": null,`},
		{`"decided_at": "2025-11-29T20:00:02.731Z"`, `"decided_at": "2025-11-29T20:00:02.731-07:30"`},
	},
	schemas.KindJobStatus: {
		{`"coordinator": "coordinator-0",`, ``},
		{`"state": "running",`, `"state": "queued",`},
	},
	schemas.KindBreakGlassRequest: {
		{`"problem_type": "lean_proof",`, ``, `"budget_usd": 1,`, ``},
		{`"plugins": [
    {"id": "fusion", "model": "anthropic/claude-opus-4.8", "analysis_models": ["anthropic/claude-opus", "deepseek/deepseek-v4", "google/gemini-3.1-pro"]}
  ],`, `"parent_request_id": "bg-0",`},
	},
	schemas.KindBreakGlassResponse: {
		{`"outcome": "answered",`, `"outcome": "degraded", "reason": "judge output invalid twice",`},
		{`"outcome": "answered",`, `"outcome": "refused", "reason": "no \"break glass:\" trigger",`},
	},
	schemas.KindBreakGlassApproval: {
		{`"state": "approved",`, `"state": "pending",`, `"decided_by": "bob",`, ``, `"decided_at": "2025-11-29T21:05:00Z"`, `"decided_at": "0001-01-01T00:00:00Z"`},
	},
	schemas.KindBreakGlassAudit: {
		{`"outcome": "answered",`, `"outcome": "approved",`, `"confidence": 0.85,`, ``},
		{`"request_kind": "break_glass_request",`, `"request_kind": "arbitration_request",`},
	},
	schemas.KindArbitrationRequest: {
		// Only the own model's rung; its tally decides the candidates.
		{`,
    {"rung": "stronger_model", "counted": 10, "valid": 10, "red_flagged": 0, "tally": [
      {"vote_key": "{\"move\":[1,0,2],\"next_state\":[[10,9,8,7,6,5,4,3,2],[],[1]]}", "votes": 6},
      {"vote_key": "{\"move\":[1,0,1],\"next_state\":[[10,9,8,7,6,5,4,3,2],[1],[]]}", "votes": 4}
    ]}`, ``, `"votes": 49}`, `"votes": 45}`, `"votes": 46}`, `"votes": 40}`, `"samples": 110`, `"samples": 100`},
		{`"min_confidence": 0.7`, `"min_confidence": 1`, `"red_flags": {"parse": 4}, `, ``},
	},
	schemas.KindArbitrationResponse: {
		{`"outcome": "answered",`, `"outcome": "held", "reason": "estimated cost $2.40 is over $2.00: held until a person approves",`,
			`  "decision": {
    "version": 1,
    "kind": "arbiter_decision",
    "tenant": "acme",
    "job_id": "hanoi-10-k3",
    "step": 731,
    "request_id": "arbitration-b65a9cc926c109637e22352bc5939f95",
    "outcome": "decided",
    "vote_key": "{\"move\":[1,0,1],\"next_state\":[[10,9,8,7,6,5,4,3,2],[1],[]]}",
    "confidence": 0.9,
    "threshold": 0.7,
    "reason": "arbiter decision by anthropic/claude-opus-4.8 over a panel of 3 (confidence 0.90)",
    "judge_model": "anthropic/claude-opus-4.8",
    "panel": ["openai/gpt-5.5", "anthropic/claude-fable", "moonshotai/kimi-k2.6"],
    "cost_usd": 0.12,
    "decided_at": "2025-11-29T20:10:00Z"
  },
`, ``, `"failed_members": ["moonshotai/kimi-k2.6"],`, ``},
		{`"outcome": "answered",`, `"outcome": "refused",`, `"outcome": "decided",`, `"outcome": "needs_human",`,
			`"vote_key": "{\"move\":[1,0,1],\"next_state\":[[10,9,8,7,6,5,4,3,2],[1],[]]}",`, ``},
	},
	schemas.KindArbiterDecision: {
		{`"outcome": "decided",`, `"outcome": "needs_human",`, `"vote_key": "{\"move\":[1,0,1],\"next_state\":[[10,9,8,7,6,5,4,3,2],[1],[]]}",`, ``},
	},
	schemas.KindJobReport: {
		{`"state": "solved",
  "solved": true,`, `"state": "no_consensus", "solved": false, "reason": "step 731: no lead of 3 in 100 samples", "no_consensus": {"step": 731, "samples": 100, "tally": [{"vote_key": "a", "votes": 40}]},`},
		{`"red_flags": {"length": 4, "parse": 16},`, `"red_flags": null, "error_steps": [],`, `"params": {"disks": 10},`, `"params": null,`},
		{`"errors": 0,`, `"errors": 2, "error_steps": [17, 731],`},
	},
}

// seeds returns kind's golden message and its edits.
func seeds(t testing.TB, kind string) [][]byte {
	g := string(golden(t, kind))
	out := [][]byte{[]byte(g)}
	for _, e := range seedEdits[kind] {
		s := g
		for i := 0; i < len(e); i += 2 {
			if !strings.Contains(s, e[i]) {
				t.Fatalf("%s seed: no %q", kind, e[i])
			}
			s = strings.Replace(s, e[i], e[i+1], 1)
		}
		out = append(out, []byte(s))
	}
	return out
}

// fuzzDecode checks, for any input, that Decode does not panic and that a
// message it accepts
//   - re-encodes and re-decodes to an equal message,
//   - encodes to the same bytes the second time, and
//   - encodes to JSON its schema accepts (the schema is never stricter than
//     Validate).
func fuzzDecode(f *testing.F, kind string) {
	for _, s := range seeds(f, kind) {
		f.Add(s)
	}
	for _, b := range invalidFiles(f, kind) {
		f.Add(b)
	}
	committedSchemas(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newMessage(t, kind)
		if err := schemas.Decode(data, m); err != nil {
			return
		}
		b1, err := schemas.Encode(m)
		if err != nil {
			t.Fatalf("Decode accepted what Encode refuses: %v\ninput: %s", err, data)
		}
		back := newMessage(t, kind)
		if err := schemas.Decode(b1, back); err != nil {
			t.Fatalf("Decode(Encode(m)): %v\nencoded: %s", err, b1)
		}
		if !reflect.DeepEqual(normalized(t, back), normalized(t, m)) {
			t.Fatalf("round trip changed the message:\n got %+v\nwant %+v", back, m)
		}
		b2, err := schemas.Encode(back)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("second Encode differs:\n%s\n%s", b1, b2)
		}
		if err := validateSchema(t, kind, b1); err != nil {
			t.Fatalf("the JSON Schema rejects what Encode wrote: %v\nencoded: %s", strings.TrimSpace(err.Error()), b1)
		}
	})
}

// invalidFiles returns the invalid files of kind (testdata/invalid).
func invalidFiles(t testing.TB, kind string) [][]byte {
	paths, err := filepath.Glob(filepath.Join("testdata", "invalid", kind+".*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// The seed edits still apply to the golden files and give valid messages,
// so the fuzzers start from the shapes they are meant to.
func TestFuzzSeedsDecode(t *testing.T) {
	t.Parallel()
	for _, mt := range schemas.All() {
		for i, s := range seeds(t, mt.Kind) {
			if err := schemas.Decode(s, mt.New()); err != nil {
				t.Errorf("%s seed %d: %v", mt.Kind, i, err)
			}
		}
	}
}
