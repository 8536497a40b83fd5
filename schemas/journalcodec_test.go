package schemas

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// deltaReflect is how a Delta was written before deltaCodec: every field of
// Figures by reflection, those that hold their zero value (a map or slice:
// also empty) left out. deltaCodec is held to it.
func deltaReflect(d Delta) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	v := reflect.ValueOf(d.Figures)
	typ := v.Type()
	for i := range typ.NumField() {
		fv := v.Field(i)
		if fv.IsZero() || (fv.Kind() == reflect.Map || fv.Kind() == reflect.Slice) && fv.Len() == 0 {
			continue
		}
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		val, err := json.Marshal(fv.Interface())
		if err != nil {
			return nil, err
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + name + `":`)
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// checkDelta: d is written as deltaReflect writes it, alone and inside a
// journal entry (as json.Marshal writes the entry with that Delta), or
// refused by both.
func checkDelta(t *testing.T, d Delta) {
	t.Helper()
	want, wantErr := deltaReflect(d)
	got, err := d.MarshalJSON()
	if (err != nil) != (wantErr != nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("Delta.MarshalJSON: error %v, the reflection path %v", err, wantErr)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Delta.MarshalJSON wrote\n%s\nthe reflection path\n%s", got, want)
	}
	e := JournalEntry{Header: NewHeader(KindJournalEntry), Tenant: "t", JobID: "j", Type: EntryDecision, Token: 1, Owner: "o", Work: d}
	ref, refErr := json.Marshal(&e)
	out, outErr := journalEntryCodec.appendTo(nil, &e)
	if (outErr != nil) != (refErr != nil) || outErr != nil && outErr.Error() != refErr.Error() {
		t.Fatalf("the entry's codec: error %v, json.Marshal %v", outErr, refErr)
	}
	if !bytes.Equal(out, ref) {
		t.Errorf("the entry's codec wrote\n%s\njson.Marshal\n%s", out, ref)
	}
}

func TestDeltaMarshal(t *testing.T) {
	t.Run("fields", func(t *testing.T) { checkMembers(t, deltaCodec) })
	var full Figures
	n := 0
	fillWire(t, reflect.ValueOf(&full).Elem(), &n)
	for _, tc := range []struct {
		name string
		f    Figures
	}{
		{"zero", Figures{}},
		{"every field", full},
		{"a typical step", Figures{Steps: 1, Samples: 3, Votes: 3, PromptTokens: 1500, CompletionTokens: 60, SampleCostNanoUSD: 1234, SpeculativeSamples: 2}},
		{"empty map and lists", Figures{RedFlags: map[string]int64{}, ErrorSteps: []int64{}, ArbiterSteps: []int64{}}},
		{"a zero in a map", Figures{RedFlags: map[string]int64{"length": 0, "<format>": 2}}},
		{"negative zero cost", Figures{ArbiterCostUSD: math.Copysign(0, -1)}},
		{"tiny cost", Figures{ArbiterCostUSD: 1e-9}},
		{"NaN cost", Figures{Steps: 1, ArbiterCostUSD: math.NaN()}},
		{"infinite cost", Figures{ArbiterCostUSD: math.Inf(1)}},
		{"negative counts", Figures{Steps: -1, MaxSamplesInStep: -2}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkDelta(t, Delta{tc.f}) })
	}
}

// A time json.Marshal refuses (a year past 9999, an offset past 24 hours) is
// refused with its words.
func TestJournalEntryTimeRefused(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 25*3600)),
	} {
		e := &JournalEntry{Header: NewHeader(KindJournalEntry), Tenant: "t", JobID: "j", Type: EntryDecision, Token: 1, Owner: "o", At: at}
		_, want := json.Marshal(e)
		got, err := journalEntryCodec.appendTo([]byte("x"), e)
		if want == nil || err == nil || err.Error() != want.Error() || string(got) != "x" {
			t.Errorf("at %v: codec %q, %v; json.Marshal %v", at, got, err, want)
		}
	}
}

// FuzzJournalEntryEncode: the codec writes any entry (valid or not) as
// json.Marshal does, byte for byte, and refuses what it refuses; its
// Delta as the reflection path did.
func FuzzJournalEntryEncode(f *testing.F) {
	f.Add("acme", "j-1", "decision", int64(3), "c-1", int64(41), int64(2), "A|B", 3, 1, "length", 2, "B|C", 1.5e-7, int64(7), uint8(3), false)
	f.Add("a<b>&c", "j\u2028\u2029", "end", int64(-1), "\x00\x1f\"\\\xff", int64(math.MinInt64), int64(math.MaxInt64), "", math.MinInt, 0, "", -3, "\xff", math.NaN(), int64(0), uint8(0), true)
	f.Add("", "", "", int64(0), "", int64(0), int64(0), "", 0, 0, "\u00e9", 0, "", math.Copysign(0, -1), int64(-5), uint8(17), true)
	f.Fuzz(func(t *testing.T, tenant, job, typ string, token int64, owner string, step, n int64, voteKey string, votes, lead int,
		flag string, flagged int, other string, cost float64, tokens int64, lists uint8, rare bool) {
		e := &JournalEntry{
			Header: NewHeader(KindJournalEntry), Tenant: tenant, JobID: job, Type: typ, Token: token, Owner: owner, Step: step, Epoch: n,
			VoteKey: voteKey, Votes: votes, Lead: lead, Counted: votes + flagged, Valid: votes, RedFlagged: flagged, Rung: other,
			K: lead, State: other, Reason: flag,
		}
		if n >= 0 { // else the zero time
			e.At = time.Unix(step%(1<<40), n%1e9).In(time.FixedZone("", lead%86400))
		}
		if lists%3 > 0 {
			e.RedFlags = map[string]int{flag: flagged, other: votes}
			e.Tally = []TallyEntry{{voteKey, votes}, {other, lead}}
		}
		if lists%4 == 1 {
			e.RedFlags, e.Tally = map[string]int{}, []TallyEntry{}
		}
		for i := range int(lists % 5) {
			e.Work.ErrorSteps = append(e.Work.ErrorSteps, step+int64(i))
		}
		e.Work.Steps, e.Work.Samples, e.Work.PromptTokens, e.Work.ArbiterCostUSD = n%3, int64(votes), tokens, cost
		e.Work.MaxSamplesInStep, e.Work.MaxSamplesStep = lead, step
		if lists%2 == 1 {
			e.Work.RedFlags = map[string]int64{flag: int64(flagged)}
		}
		if rare {
			e.Prior = []RungTally{{Rung: other, Counted: votes, Tally: e.Tally, RedFlags: e.RedFlags}}
			e.Arbiter = &ArbiterDecision{Tenant: tenant, Step: step, VoteKey: voteKey, Confidence: cost, DecidedAt: e.At}
			e.NoConsensus = &NoConsensus{Step: step, Tally: e.Tally, Prior: e.Prior}
		}
		ref, refErr := json.Marshal(e)
		got, err := journalEntryCodec.appendTo([]byte("x"), e)
		if (err != nil) != (refErr != nil) || err != nil && err.Error() != refErr.Error() {
			t.Fatalf("codec error %v, json.Marshal %v", err, refErr)
		}
		if err != nil {
			if string(got) != "x" {
				t.Fatalf("a failed write changed dst: %q", got)
			}
		} else if !bytes.Equal(got[1:], ref) {
			t.Fatalf("codec wrote\n%s\njson.Marshal\n%s", got[1:], ref)
		}
		checkDelta(t, e.Work)
	})
}

// reflectDelta is a Delta written the way it was before deltaCodec.
type reflectDelta Delta

func (d reflectDelta) MarshalJSON() ([]byte, error) { return deltaReflect(Delta(d)) }

// A typical decision entry, written by the codec (Encode) and as it was
// before (validated, then json.Marshal with the Delta by reflection; the
// work object moves to the end there, which costs the same).
func BenchmarkJournalEntryEncode(b *testing.B) {
	e := &JournalEntry{
		Header: NewHeader(KindJournalEntry), Tenant: "acme", JobID: "j8f3k2p9q-1a2b3c4d5e", Type: EntryDecision,
		Token: 3, Owner: "coordinator-7f3a", Step: 524287, VoteKey: "move 1 0 2", Votes: 3, Lead: 3, Counted: 3, Valid: 3,
		Tally: []TallyEntry{{"move 1 0 2", 3}}, K: 3,
		Work: Delta{Figures{Steps: 1, Samples: 3, Votes: 3, PromptTokens: 2130, CompletionTokens: 96, SpeculativeSamples: 3, SampleCostNanoUSD: 1021}},
		At:   time.Date(2026, 12, 6, 21, 0, 0, 123456789, time.UTC),
	}
	old := struct {
		*JournalEntry
		Work reflectDelta `json:"work"`
	}{e, reflectDelta(e.Work)}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Encode(e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := e.Validate(); err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(old); err != nil {
				b.Fatal(err)
			}
		}
	})
}
