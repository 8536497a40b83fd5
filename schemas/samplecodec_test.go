package schemas_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/makerfleet/makerfleet/schemas"
)

// The sample messages' codecs (samplecodec.go) against the reflection
// path: Decode reads what DecodeReflect reads, to the same value and the
// same error, and Encode and the Append functions write what json.Marshal
// writes.

// typicalSamples are the hot path's messages as they go on the wire: the
// golden request (a Hanoi state of 10 disks, params inline), the same
// with one and with four more samples (Also), and the golden result (a
// vote).
func typicalSamples(t testing.TB) []namedMessage {
	req := func(also int) *schemas.SampleRequest {
		r := decodeGolden(t, schemas.KindSampleRequest).(*schemas.SampleRequest)
		if also == 0 {
			return r
		}
		r.Temperature = 0.1
		for i := 1; i <= also; i++ {
			r.Also = append(r.Also, schemas.SampleMember{Index: i, Seed: r.Seed + int64(i)*7919, Token: fmt.Sprintf("q3Yh0vJ2_kQ9mC1xZpL8a%d", i)})
		}
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	res := func(also int) *schemas.SampleResult {
		r := decodeGolden(t, schemas.KindSampleResult).(*schemas.SampleResult)
		for i := 1; i <= also; i++ {
			m := schemas.ResultMember{Index: i, Outcome: schemas.OutcomeVote, VoteKey: r.VoteKey, FinishReason: "stop",
				CompletionTokens: 60 + i, LatencyMS: 843.2, Token: fmt.Sprintf("q3Yh0vJ2_kQ9mC1xZpL8a%d", i)}
			if i == 2 {
				m.Outcome, m.VoteKey, m.RedFlag, m.Detail = schemas.OutcomeRedFlag, "", schemas.RedFlagParse, "no \"move\" line"
			}
			r.Also = append(r.Also, m)
		}
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	return []namedMessage{
		{"request", req(0)},
		{"request_also1", req(1)},
		{"request_also4", req(4)},
		{"result", res(0)},
		{"result_also3", res(3)},
	}
}

type namedMessage struct {
	name string
	msg  schemas.Message
}

// appendFast writes m with its codec.
func appendFast(dst []byte, m schemas.Message) ([]byte, error) {
	switch m := m.(type) {
	case *schemas.SampleRequest:
		return schemas.AppendSampleRequest(dst, m)
	case *schemas.SampleResult:
		return schemas.AppendSampleResult(dst, m)
	}
	panic(fmt.Sprintf("no codec for %T", m))
}

// sameDecode decodes data both ways into fresh messages of kind and fails
// unless they agree on the error (its text, and so its sentinel) and on
// the value. It returns the message, whether the codec read it itself and
// the error.
func sameDecode(t *testing.T, kind string, data []byte) (schemas.Message, bool, error) {
	t.Helper()
	fast, slow := newMessage(t, kind), newMessage(t, kind)
	errFast := schemas.Decode(data, fast)
	errSlow := schemas.DecodeReflect(data, slow)
	if fmt.Sprint(errFast) != fmt.Sprint(errSlow) {
		t.Fatalf("Decode: %v\nreflection: %v\ninput: %q", errFast, errSlow, data)
	}
	for _, s := range []error{schemas.ErrInvalid, schemas.ErrKind, schemas.ErrVersion} {
		if errors.Is(errFast, s) != errors.Is(errSlow, s) {
			t.Fatalf("Decode: %v, reflection: %v: not the same sentinel\ninput: %q", errFast, errSlow, data)
		}
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("Decode read\n%#v\nreflection\n%#v\ninput: %q", fast, slow, data)
	}
	took := len(data) <= schemas.MaxMessageBytes && utf8.Valid(data) && schemas.DecodeFast(data, newMessage(t, kind))
	return fast, took, errFast
}

// sameEncode fails unless the codec writes m as json.Marshal does (or
// both refuse it), and Encode as the reflection path's Encode.
func sameEncode(t *testing.T, m schemas.Message) {
	t.Helper()
	want, wantErr := json.Marshal(m)
	got, err := appendFast([]byte("dst"), m)
	switch {
	case (err != nil) != (wantErr != nil):
		t.Fatalf("Append: %v, json.Marshal: %v\nvalue: %#v", err, wantErr, m)
	case err != nil:
		if string(got) != "dst" {
			t.Fatalf("a failed Append changed dst: %q", got)
		}
	case !bytes.Equal(got[3:], want) || string(got[:3]) != "dst":
		t.Fatalf("Append wrote\n%s\njson.Marshal\n%s", got, want)
	}
	enc, encErr := schemas.Encode(m)
	refl, reflErr := schemas.EncodeReflect(m)
	switch {
	case (encErr != nil) != (reflErr != nil):
		t.Fatalf("Encode: %v, reflection: %v", encErr, reflErr)
	case encErr != nil:
		// Validate's error is the same; json.Marshal's is worded its own way.
		if m.Validate() != nil && encErr.Error() != reflErr.Error() {
			t.Fatalf("Encode: %v, reflection: %v", encErr, reflErr)
		}
	case !bytes.Equal(enc, refl):
		t.Fatalf("Encode wrote\n%s\nreflection\n%s", enc, refl)
	}
}

// readsBack: a valid m is read back from Encode's output by the codec,
// as the reflection path reads it.
func readsBack(t *testing.T, m schemas.Message) {
	t.Helper()
	if m.Validate() != nil {
		return
	}
	data, err := schemas.Encode(m)
	if err != nil {
		return // json.Marshal refuses it too (sameEncode)
	}
	if _, took, err := sameDecode(t, m.MessageKind(), data); err != nil || !took {
		t.Fatalf("Encode's output: error %v, read by the codec %v\n%s", err, took, data)
	}
}

// Real messages, compact or not, are read by the codecs themselves (not
// handed to the reflection path), to the reflection path's values.
func TestSampleCodecTakesRealMessages(t *testing.T) {
	t.Parallel()
	type input struct {
		kind string
		data []byte
	}
	var inputs []input
	for _, kind := range []string{schemas.KindSampleRequest, schemas.KindSampleResult} {
		for _, s := range seeds(t, kind) {
			inputs = append(inputs, input{kind, s})
		}
	}
	for _, tc := range typicalSamples(t) {
		compact, err := json.Marshal(tc.msg)
		if err != nil {
			t.Fatal(err)
		}
		indented, err := json.MarshalIndent(tc.msg, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, input{tc.msg.MessageKind(), compact}, input{tc.msg.MessageKind(), indented})
		sameEncode(t, tc.msg)
	}
	for _, in := range inputs {
		if _, took, err := sameDecode(t, in.kind, in.data); err != nil || !took {
			t.Errorf("%s: error %v, read by the codec: %v\n%s", in.kind, err, took, in.data)
		}
	}
}

// sampleCorners are inputs at the corners of encoding/json's and
// checkKeys' rules, as edits of the compact golden request (a "" old
// string replaces the whole message); fast says whether the codec reads
// the result itself (false: the reflection path does, accepting it or
// not).
var sampleCorners = []struct {
	kind, old, new string
	fast           bool
}{
	// keys
	{schemas.KindSampleRequest, `"tenant":`, `"Tenant":`, false},
	{schemas.KindSampleRequest, `"tenant":`, `"TENANT":`, false},
	{schemas.KindSampleRequest, `"task":`, `"\u0074ask":`, false}, // accepted: the key is "task"
	{schemas.KindSampleRequest, `"task":`, `"tas\u212a":`, false},
	{schemas.KindSampleRequest, `"tenant":"acme",`, `"tenant":"acme","tenant":"acme",`, false},
	{schemas.KindSampleRequest, `"tenant":"acme",`, `"tenant":"acme","urgency":1,`, false},
	{schemas.KindSampleRequest, `{"version":1,`, `{"version":1,"version":1,`, false},
	// header
	{schemas.KindSampleRequest, `"version":1`, `"version":2`, true},
	{schemas.KindSampleRequest, `"version":1`, `"version":"1"`, false},
	{schemas.KindSampleRequest, `"version":1`, `"version":1.0`, false},
	{schemas.KindSampleRequest, `"version":1`, `"version":null`, true},
	{schemas.KindSampleRequest, `"kind":"sample_request"`, `"kind":"sample_result"`, true},
	{schemas.KindSampleRequest, `"kind":"sample_request"`, `"kind":null`, true},
	{schemas.KindSampleRequest, `"kind":"sample_request",`, `"kind":"sample_result","Kind":"sample_request",`, false},
	{schemas.KindSampleRequest, `"kind":"sample_request",`, `"kind":"sample_result","urgency":1,`, false},
	{schemas.KindSampleRequest, `"kind":"sample_request",`, `"kind":"x","kind":"sample_request",`, false},
	// numbers
	{schemas.KindSampleRequest, `"step":0`, `"step":1e2`, false},
	{schemas.KindSampleRequest, `"step":0`, `"step":1.0`, false},
	{schemas.KindSampleRequest, `"step":0`, `"step":-0`, true},
	{schemas.KindSampleRequest, `"step":0`, `"step":00`, false},
	{schemas.KindSampleRequest, `"step":0`, `"step":null`, true},
	{schemas.KindSampleRequest, `"step":0`, `"step":"0"`, false},
	{schemas.KindSampleRequest, `"step":0`, `"step":true`, false},
	{schemas.KindSampleRequest, `"seed":7436120881546318043`, `"seed":9223372036854775807`, true},
	{schemas.KindSampleRequest, `"seed":7436120881546318043`, `"seed":-9223372036854775808`, true},
	{schemas.KindSampleRequest, `"seed":7436120881546318043`, `"seed":9223372036854775808`, false},
	{schemas.KindSampleRequest, `"seed":7436120881546318043`, `"seed":-9223372036854775809`, false},
	{schemas.KindSampleRequest, `"seed":7436120881546318043`, `"seed":12345678901234567890123`, false},
	{schemas.KindSampleRequest, `"temperature":0`, `"temperature":1E0`, true},
	{schemas.KindSampleRequest, `"temperature":0`, `"temperature":-0.0`, true},
	{schemas.KindSampleRequest, `"temperature":0`, `"temperature":1e-400`, true},
	{schemas.KindSampleRequest, `"temperature":0`, `"temperature":1e400`, false},
	{schemas.KindSampleRequest, `"temperature":0`, `"temperature":.5`, false},
	{schemas.KindSampleRequest, `"temperature":0`, `"temperature":5.`, false},
	{schemas.KindSampleRequest, `"temperature":0`, `"temperature":null`, true},
	{schemas.KindSampleRequest, `"max_output_tokens":750`, `"max_output_tokens":7.5e2`, false},
	// strings
	{schemas.KindSampleRequest, `"task":"hanoi"`, `"task":"h\u0061noi"`, true},
	{schemas.KindSampleRequest, `"task":"hanoi",`, `"task":"hanoi","model":"\ud83d\ude00 \ud800 \udc00\ud800 \ud800\u0041 \\ \/ \b\f\n\r\t \u0000 é",`, true},
	{schemas.KindSampleRequest, `"task":"hanoi",`, `"task":"hanoi","model":"\x",`, false},
	{schemas.KindSampleRequest, `"task":"hanoi",`, `"task":"hanoi","model":"\u12",`, false},
	{schemas.KindSampleRequest, `"task":"hanoi",`, "\"task\":\"hanoi\",\"model\":\"a\tb\",", false},
	{schemas.KindSampleRequest, `"task":"hanoi",`, `"task":"hanoi","model":null,`, true},
	{schemas.KindSampleRequest, `"task":"hanoi",`, `"task":"hanoi","model":"",`, true},
	{schemas.KindSampleRequest, `"task":"hanoi",`, `"task":"hanoi","model":5,`, false},
	// raw JSON
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params": { "disks" : 10 , "x" : [ 1 , "<&>" ] } `, true},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":null`, true},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":"x"`, true},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":{"disks":10,"disks":11}`, false},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":{"disks":10,"\u0064isks":11}`, false},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":{"a":{"b":1},"c":{"b":1}}`, true},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":{"a":{"b":1,"b":2}}`, false},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":[{"b":1},{"b":1,"b":2}]`, false},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":{"disks":01}`, false},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":{"disks":tru}`, false},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":{"disks":10,}`, false},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":` + strings.Repeat("[", 100) + strings.Repeat("]", 100), false},
	{schemas.KindSampleRequest, `"params":{"disks":10}`, `"params":{` + manyKeys(70) + `}`, false},
	{schemas.KindSampleRequest, `"state":{`, `"state":{"prev":null,`, true},
	// times
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T21:00:00.512+01:00"`, true},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":null`, true},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512\u005a"`, false},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29 20:00:00Z"`, false},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":0`, false},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":{}`, false},
	// also
	{schemas.KindSampleRequest, `"temperature":0`, `"temperature":0.1`, true},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":[]`, true},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":null`, true},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":[null]`, true},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":[{}]`, true},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":{}`, false},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":[{"index":1,"seed":2,"token":"q3Yh0vJ2_kQ9mC1xZpL8aw","temperature":0.1}]`, true},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":[{"index":1,"seed":2,"token":"q3Yh0vJ2_kQ9mC1xZpL8aw"},{"index":2,"seed":3,"token":"q3Yh0vJ2_kQ9mC1xZpL8aw"}]`, true},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":[{"index":1,"Seed":2,"token":"q3Yh0vJ2_kQ9mC1xZpL8aw"}]`, false},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":[{"index":1,"index":2}]`, false},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":[{"index":1,"seed":2,"token":"q3Yh0vJ2_kQ9mC1xZpL8aw","x":{}}]`, false},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":[1]`, false},
	{schemas.KindSampleRequest, `"issued_at":"2025-11-29T20:00:00.512Z"`, `"issued_at":"2025-11-29T20:00:00.512Z","also":[{},]`, false},
	// the document
	{schemas.KindSampleRequest, `}`, `} `, true},
	{schemas.KindSampleRequest, `}`, "}\n\t\r ", true},
	{schemas.KindSampleRequest, `}`, `}}`, false},
	{schemas.KindSampleRequest, `}`, `} {}`, false},
	{schemas.KindSampleRequest, `}`, `}x`, false},
	{schemas.KindSampleRequest, `}`, ``, false},
	{schemas.KindSampleRequest, `{`, " \n{", true},
	{schemas.KindSampleRequest, `{`, "\ufeff{", false},
	{schemas.KindSampleRequest, ``, `null`, false},
	{schemas.KindSampleRequest, ``, `[]`, false},
	{schemas.KindSampleRequest, ``, `{}`, true},
	{schemas.KindSampleRequest, ``, ``, false},
	{schemas.KindSampleRequest, ``, `  `, false},
	{schemas.KindSampleRequest, ``, `"x"`, false},
	// a result
	{schemas.KindSampleResult, `"vote_key":"{`, `"vote_key":"{ \u003c\u0026\u003e `, true},
	{schemas.KindSampleResult, `"latency_ms":843.2`, `"latency_ms":8.432e2`, true},
	{schemas.KindSampleResult, `"latency_ms":843.2`, `"latency_ms":-1`, true},
	{schemas.KindSampleResult, `"prompt_tokens":412`, `"prompt_tokens":412.0`, false},
	{schemas.KindSampleResult, `"outcome":"vote"`, `"outcome":"VOTE"`, true},
	{schemas.KindSampleResult, `"token":"q3Yh0vJ2_kQ9mC1xZpL8aw",`, ``, true},
	{schemas.KindSampleResult, `"kind":"sample_result"`, `"kind":"sample_request"`, true},
	{schemas.KindSampleResult, `"kind":"sample_result",`, `"kind":"sample_request","seed":7,`, false},
	{schemas.KindSampleResult, `"voter_id":"voter-7f3c"`, `"voter_id":"voter-7f3c","also":[]`, true},
	{schemas.KindSampleResult, `"voter_id":"voter-7f3c"`, `"voter_id":"voter-7f3c","also":null`, true},
	{schemas.KindSampleResult, `"voter_id":"voter-7f3c"`, `"voter_id":"voter-7f3c","also":[{"index":1,"outcome":"vote","vote_key":"k","prompt_tokens":0,"completion_tokens":3,"latency_ms":1,"token":"q3Yh0vJ2_kQ9mC1xZpL8aw"}]`, true},
	{schemas.KindSampleResult, `"voter_id":"voter-7f3c"`, `"voter_id":"voter-7f3c","also":[{"index":0,"outcome":"vote","vote_key":"k","prompt_tokens":0,"completion_tokens":3,"latency_ms":1}]`, true},
	{schemas.KindSampleResult, `"voter_id":"voter-7f3c"`, `"voter_id":"voter-7f3c","also":[{"index":1,"outcome":"unserved"}]`, true},
	{schemas.KindSampleResult, `"voter_id":"voter-7f3c"`, `"voter_id":"voter-7f3c","also":[{"index":1,"outcome":"vote","model":"x"}]`, false},
	{schemas.KindSampleResult, `"voter_id":"voter-7f3c"`, `"voter_id":"voter-7f3c","also":{}`, false},
}

func manyKeys(n int) string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf(`"k%d":%d`, i, i)
	}
	return strings.Join(keys, ",")
}

// compactGolden is kind's golden message as json.Marshal writes it.
func compactGolden(t testing.TB, kind string) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, golden(t, kind)); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestSampleCodecCorners: the codec and the reflection path agree at the
// corners, and the codec reads the plain ones itself.
func TestSampleCodecCorners(t *testing.T) {
	t.Parallel()
	for i, c := range sampleCorners {
		data := c.new
		if c.old != "" {
			g := compactGolden(t, c.kind)
			if !strings.Contains(g, c.old) {
				t.Fatalf("corner %d: no %q in %s", i, c.old, g)
			}
			data = strings.Replace(g, c.old, c.new, 1)
		}
		_, took, err := sameDecode(t, c.kind, []byte(data))
		if took != c.fast {
			t.Errorf("corner %d (%s): read by the codec: %v, want %v (error %v)", i, data, took, c.fast, err)
		}
	}
}

// A nil message is refused as the reflection path refuses it.
func TestSampleCodecNilTarget(t *testing.T) {
	t.Parallel()
	data := golden(t, schemas.KindSampleResult)
	var res *schemas.SampleResult
	fast, slow := schemas.Decode(data, res), schemas.DecodeReflect(data, res)
	if fast == nil || fast.Error() != slow.Error() {
		t.Errorf("Decode into nil: %v, reflection: %v", fast, slow)
	}
	var req *schemas.SampleRequest
	if err := schemas.Decode(golden(t, schemas.KindSampleRequest), req); !errors.Is(err, schemas.ErrInvalid) {
		t.Errorf("Decode into nil: %v", err)
	}
}

// Both paths check size and UTF-8 before anything else.
func TestSampleCodecLimits(t *testing.T) {
	t.Parallel()
	g := []byte(compactGolden(t, schemas.KindSampleResult))
	big := append(bytes.Repeat([]byte(" "), schemas.MaxMessageBytes), g...)
	for _, data := range [][]byte{big, big[len(big)-schemas.MaxMessageBytes:], bytes.Replace(g, []byte("acme"), []byte("ac\xffme"), 1)} {
		sameDecode(t, schemas.KindSampleResult, data)
	}
}

// sampleSeeds are the decode fuzzers' seeds of kind: the golden message
// and its edits, the invalid files, the typical messages and the corners.
func sampleSeeds(t testing.TB, kind string) [][]byte {
	out := append(seeds(t, kind), invalidFiles(t, kind)...)
	for _, tc := range typicalSamples(t) {
		if tc.msg.MessageKind() == kind {
			b, err := json.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
	}
	for _, c := range sampleCorners {
		if c.kind == kind && c.old != "" {
			out = append(out, []byte(strings.Replace(compactGolden(t, kind), c.old, c.new, 1)))
		}
	}
	return out
}

func FuzzSampleRequestDecode(f *testing.F) { fuzzSampleDecode(f, schemas.KindSampleRequest) }
func FuzzSampleResultDecode(f *testing.F)  { fuzzSampleDecode(f, schemas.KindSampleResult) }

// fuzzSampleDecode: for any input, Decode (the codec) and DecodeReflect
// agree on the error and on the value; a message they accept the codec
// writes back as json.Marshal does.
func fuzzSampleDecode(f *testing.F, kind string) {
	for _, s := range sampleSeeds(f, kind) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _, err := sameDecode(t, kind, data)
		if err == nil {
			sameEncode(t, m)
		}
	})
}

// fuzzTime makes a time from fuzz input: the zero time for nsec < 0,
// else Unix(sec, nsec) in a zone offset by zone seconds (some beyond what
// RFC 3339 writes, and years beyond 9999, which json.Marshal refuses).
func fuzzTime(sec, nsec int64, zone int) time.Time {
	if nsec < 0 {
		return time.Time{}
	}
	return time.Unix(sec, nsec).In(time.FixedZone("", zone))
}

// FuzzSampleRequestEncode: the codec writes any request (valid or not)
// as json.Marshal does, byte for byte, and refuses what it refuses.
func FuzzSampleRequestEncode(f *testing.F) {
	for _, tc := range typicalSamples(f) {
		if r, ok := tc.msg.(*schemas.SampleRequest); ok {
			f.Add(r.Tenant, r.JobID, r.SampleID, r.Step, r.Epoch, r.Index, r.Attempt, r.Branch, r.Task, r.TaskVersion, r.TaskHash,
				[]byte(r.Params), []byte(r.State), r.ParamsRef, r.Temperature, r.Seed, r.MaxOutputTokens, r.Model, r.PromptVariant, r.Token,
				r.IssuedAt.Unix(), int64(r.IssuedAt.Nanosecond()), 0, uint8(len(r.Also)), 0.0)
		}
	}
	f.Add("a<b>&c", "j\u2028\u2029", "\x00\x1f\"\\\xff", int64(-1), int64(math.MaxInt64), -5, math.MinInt, int64(7), "t", "1.0", "sha256:x",
		[]byte(" { \"a\" : [ 1 , \"<\u2028>\" ] }\n"), []byte(`"\u00e9"`), "inputs:x", 1e-7, int64(math.MinInt64), 0, "m", 3, "tok",
		int64(253402300800), int64(0), 3600, uint8(3), 0.7)
	f.Add("", "", "", int64(0), int64(0), 0, 0, int64(0), "", "", "", []byte(nil), []byte{}, "", math.Inf(1), int64(0), 0, "", 0, "",
		int64(0), int64(-1), 0, uint8(0), math.NaN())
	f.Add("x", "y", "z", int64(1), int64(2), 3, 4, int64(5), "t", "", "", []byte(`{"a":1,}`), []byte(`[1e400]`), "", 1e21, int64(1), 1, "", 0, "",
		int64(-62135596801), int64(999999999), -86400, uint8(17), math.Copysign(0, -1))
	f.Fuzz(func(t *testing.T, tenant, job, sampleID string, step, epoch int64, index, attempt int, branch int64, task, taskVersion, taskHash string,
		params, state []byte, paramsRef string, temperature float64, seed int64, maxOut int, model string, variant int, token string,
		sec, nsec int64, zone int, also uint8, memberTemp float64) {
		r := &schemas.SampleRequest{
			Header: schemas.NewHeader(schemas.KindSampleRequest), Tenant: tenant, JobID: job, SampleID: sampleID,
			Step: step, Epoch: epoch, Index: index, Attempt: attempt, Branch: branch, Task: task, TaskVersion: taskVersion, TaskHash: taskHash,
			Params: params, ParamsRef: paramsRef, State: state, Temperature: temperature, Seed: seed, MaxOutputTokens: maxOut,
			Model: model, PromptVariant: variant, Token: token, IssuedAt: fuzzTime(sec, nsec, zone),
		}
		if also%5 == 4 {
			r.Also = []schemas.SampleMember{} // empty, not nil: left out too
		}
		for i := range int(also % 17) {
			r.Also = append(r.Also, schemas.SampleMember{
				Index: index + i + 1, Seed: seed ^ int64(i)<<7, Token: token[min(i, len(token)):], Temperature: memberTemp * float64(i%3),
			})
		}
		sameEncode(t, r)
		readsBack(t, r)
	})
}

// FuzzSampleResultEncode: the codec writes any result as json.Marshal
// does, byte for byte, and refuses what it refuses.
func FuzzSampleResultEncode(f *testing.F) {
	g := decodeGolden(f, schemas.KindSampleResult).(*schemas.SampleResult)
	f.Add(g.Tenant, g.JobID, g.SampleID, g.Step, g.Epoch, g.Index, g.Attempt, g.Branch, g.Outcome, g.VoteKey, g.RedFlag, g.Detail, g.Cause,
		g.FinishReason, g.PromptTokens, g.CompletionTokens, g.CachedPromptTokens, g.LatencyMS, g.Model, g.VoterID, g.Token, uint8(0))
	f.Add("a<b>&c", "j\u2028\u2029", "\x00\x1f\"\\\xff", int64(-1), int64(math.MaxInt64), -5, math.MinInt, int64(7), "red_flag", "", "parse",
		"line\nbreak\ttab \u007f \ufffd", "task", "length", 1, 2, 3, 1e-7, "m", "v", "tok", uint8(3))
	f.Add("", "", "", int64(0), int64(0), 0, 0, int64(0), "", "", "", "", "", "", 0, 0, 0, math.NaN(), "", "", "", uint8(17))
	f.Add("", "", "", int64(0), int64(0), 0, 0, int64(0), "", "", "", "", "", "", 0, 0, 0, 1e21, "", "", "", uint8(4))
	f.Fuzz(func(t *testing.T, tenant, job, sampleID string, step, epoch int64, index, attempt int, branch int64, outcome, voteKey, redFlag, detail, cause,
		finish string, prompt, completion, cached int, latency float64, model, voter, token string, also uint8) {
		r := &schemas.SampleResult{
			Header: schemas.NewHeader(schemas.KindSampleResult), Tenant: tenant, JobID: job, SampleID: sampleID,
			Step: step, Epoch: epoch, Index: index, Attempt: attempt, Branch: branch, Outcome: outcome, VoteKey: voteKey, RedFlag: redFlag,
			Detail: detail, Cause: cause, FinishReason: finish, PromptTokens: prompt, CompletionTokens: completion, CachedPromptTokens: cached,
			LatencyMS: latency, Model: model, VoterID: voter, Token: token,
		}
		if also%5 == 4 {
			r.Also = []schemas.ResultMember{} // empty, not nil: left out too
		}
		for i := range int(also % 17) {
			r.Also = append(r.Also, schemas.ResultMember{
				Index: index + i + 1, Outcome: outcome, VoteKey: voteKey[min(i, len(voteKey)):], RedFlag: redFlag, Detail: detail[:len(detail)/(i+1)],
				FinishReason: finish, PromptTokens: prompt - i, CompletionTokens: completion + i, CachedPromptTokens: cached, LatencyMS: latency * float64(i), Token: token[min(i, len(token)):],
			})
		}
		sameEncode(t, r)
		readsBack(t, r)
	})
}
