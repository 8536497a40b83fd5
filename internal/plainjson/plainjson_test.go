package plainjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzDecode: the reader accepts only what encoding/json accepts and
// reads the same values from it; where it is stricter (a repeated key, a
// string that is not UTF-8) encoding/json would have guessed.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"pegs":[[3,2,1],[],[]],"prev":null}`, `[1, -2.5e3, "a\u00e9\n", true, false, null]`,
		`0`, `-0`, `01`, `1.`, `1e`, `"\ud800"`, `{"a":1,"a":2}`, `[`, `{"a" 1}`, "\"\xff\"",
		`9223372036854775808`, `1e400`, ` {} `, `[] x`, `"\\"`, `{"":{"":[]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(data)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		stdErr := dec.Decode(&want)
		if stdErr == nil {
			if _, e := dec.Token(); e != io.EOF {
				stdErr = errors.New("trailing data")
			}
		}
		if err != nil {
			return // stricter is fine
		}
		if stdErr != nil {
			t.Fatalf("Decode accepted %q, encoding/json: %v", data, stdErr)
		}
		if !sameJSON(got, want) {
			t.Fatalf("Decode(%q) = %#v, encoding/json %#v", data, got, want)
		}
	})
}

// sameJSON compares a Decode value with an encoding/json (UseNumber)
// one.
func sameJSON(got, want any) bool {
	switch w := want.(type) {
	case json.Number:
		switch g := got.(type) {
		case int64:
			i, err := w.Int64()
			return err == nil && i == g
		case float64:
			f, err := w.Float64()
			return err == nil && f == g
		}
		return false
	case string:
		g, ok := got.(string)
		return ok && g == w && utf8.ValidString(g)
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, v := range w {
			if !sameJSON(g[k], v) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !sameJSON(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}

// FuzzMarshal: Marshal writes what an encoding/json Encoder with
// SetEscapeHTML(false) writes, byte for byte, for every value Decode
// reads (and for floats and strings a CEL expression could make).
func FuzzMarshal(f *testing.F) {
	for _, s := range []string{
		`{"b":[1,2.5,-0.0,1e21,1e-7,123456789012345678],"a":"x\u2028<>&\"\\\n\u0001"}`, `[null,true,false,{}]`,
		`"\ud800"`, `1.7976931348623157e308`, `5e-324`, `0.000001`, `{"é":{"":[]}}`,
	} {
		f.Add([]byte(s), 0.0, "")
	}
	f.Add([]byte(`0`), 1e-7, "\xff\xfe")
	f.Fuzz(func(t *testing.T, data []byte, x float64, s string) {
		if got, want := AppendStringHTML(nil, s), mustMarshal(t, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendStringHTML(%q) = %s, json.Marshal %s", s, got, want)
		}
		values := []any{x, s, map[string]any{s: x}}
		if v, err := Decode(data); err == nil {
			values = append(values, v)
		}
		for _, v := range values {
			got, err := Marshal(v)
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			wantErr := enc.Encode(v)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("Marshal(%#v): error %v, encoding/json %v", v, err, wantErr)
			}
			if err == nil && !bytes.Equal(got, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})) {
				t.Fatalf("Marshal(%#v) = %s, encoding/json %s", v, got, buf.Bytes())
			}
		}
	})
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAppendString: every kind of character reads back as encoding/json
// reads its own output; AppendStringHTML writes what json.Marshal writes.
func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "ctl\x00\x01\x1f\n\r\t", "utf8 é → 🙂", "bad \xff utf8", "html <&>", "sep \u2028\u2029"} {
		if got, want := AppendStringHTML(nil, s), mustMarshal(t, s); !bytes.Equal(got, want) {
			t.Errorf("AppendStringHTML(%q) = %s, json.Marshal %s", s, got, want)
		}
		got := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, got, err)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Errorf("%q round-trips to %q, want %q", s, back, wantBack)
		}
	}
}
