package spec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/makerfleet/makerfleet/internal/plainjson"
)

// quickSchemas cover every keyword quick knows, alone and together.
var quickSchemas = []string{
	`true`, `false`, `{}`,
	`{"type": "integer"}`, `{"type": "number", "minimum": 0, "exclusiveMaximum": 1.5}`,
	`{"type": ["string", "null"], "minLength": 2, "maxLength": 3}`,
	`{"enum": [1, 2.5, "a", null, true]}`, `{"const": 3}`, `{"const": 9007199254740993}`,
	`{"type": "integer", "minimum": -9007199254740993, "maximum": 9007199254740993}`,
	`{"type": "number", "exclusiveMinimum": 0.1, "maximum": 1e300}`,
	`{"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false, "minItems": 1}`,
	`{"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 1}}, "maxItems": 3}`,
	`{"type": "array", "uniqueItems": false}`,
	`{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}}, "required": ["a"], "additionalProperties": false}`,
	`{"type": "object", "additionalProperties": {"type": "boolean"}, "minProperties": 1, "maxProperties": 2}`,
	`{"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "t", "description": "d", "type": "object"}`,
}

// TestQuickForms: the schemas quick knows get a quick form; any other
// keyword, or a value a keyword does not take, gets none.
func TestQuickForms(t *testing.T) {
	for _, src := range quickSchemas {
		if quickOf(t, src) == nil {
			t.Errorf("%s: no quick form", src)
		}
	}
	for _, src := range []string{
		`{"pattern": "^a"}`, `{"$ref": "#/$defs/x", "$defs": {"x": {}}}`, `{"anyOf": [{}]}`,
		`{"multipleOf": 2}`, `{"format": "email"}`, `{"uniqueItems": true}`, `{"enum": [[1]]}`,
		`{"enum": [1], "const": 1}`, `{"type": "integer", "items": {"pattern": "x"}}`,
		`{"$schema": "http://json-schema.org/draft-07/schema#"}`, `{"type": "decimal"}`, `{"type": []}`,
		`{"minLength": -1}`, `{"minimum": "1"}`, `{"patternProperties": {"a": {}}}`, `7`,
	} {
		if quickOf(t, src) != nil {
			t.Errorf("%s: has a quick form", src)
		}
	}
}

func quickOf(t *testing.T, src string) *quick {
	t.Helper()
	v, err := plainjson.Decode([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return newQuick(v, 0)
}

// TestQuickChecks: values quick passes, and values it leaves to the
// general validator.
func TestQuickChecks(t *testing.T) {
	cases := []struct {
		schema string
		value  string
		ok     bool
	}{
		{`{"type": "integer"}`, `3`, true},
		{`{"type": "integer"}`, `3.0`, true},
		{`{"type": "integer"}`, `3.5`, false},
		{`{"type": "number"}`, `3`, true},
		{`{"type": "number", "minimum": 0, "exclusiveMaximum": 1.5}`, `1.5`, false},
		{`{"type": "number", "minimum": 0, "exclusiveMaximum": 1.5}`, `0`, true},
		{`{"type": ["string", "null"], "minLength": 2, "maxLength": 3}`, `"éé"`, true},
		{`{"type": ["string", "null"], "minLength": 2, "maxLength": 3}`, `"éééé"`, false},
		{`{"type": ["string", "null"], "minLength": 2, "maxLength": 3}`, `null`, true},
		{`{"enum": [1, 2.5, "a", null, true]}`, `1.0`, true},
		{`{"enum": [1, 2.5, "a", null, true]}`, `false`, false},
		{`{"const": 9007199254740993}`, `9007199254740993`, true},
		{`{"const": 9007199254740993}`, `9007199254740992.0`, false},
		{`{"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false, "minItems": 1}`, `[1, "a"]`, true},
		{`{"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false, "minItems": 1}`, `[1, "a", 2]`, false},
		{`{"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false, "minItems": 1}`, `[]`, false},
		{`{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}`, `{"a": 1}`, true},
		{`{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}`, `{"a": 1, "c": 2}`, false},
		{`{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}`, `{}`, false},
		{`false`, `1`, false},
	}
	for _, tc := range cases {
		q := quickOf(t, tc.schema)
		v, err := plainjson.Decode([]byte(tc.value))
		if err != nil {
			t.Fatal(err)
		}
		if got := q.ok(v, 0); got != tc.ok {
			t.Errorf("%s on %s: quick says %v, want %v", tc.schema, tc.value, got, tc.ok)
		}
	}
}

// TestExampleSchemasAreQuick: the examples' answer schemas take the quick
// path (every new answer is checked; params are checked once a job).
func TestExampleSchemasAreQuick(t *testing.T) {
	for _, name := range []string{"hanoi.yaml", "multiply.yaml", "ledger.yaml", "classify.yaml"} {
		tk := compileExample(t, name)
		if tk.answer.quick == nil {
			t.Errorf("%s: the answer schema has no quick form", name)
		}
	}
}

// FuzzQuickSchema: whatever quick passes, the general validator passes.
func FuzzQuickSchema(f *testing.F) {
	for i, v := range []string{`1`, `1.5`, `"ab"`, `null`, `[1, "a"]`, `[[1, 2], [3]]`, `{"a": 1, "b": "x"}`, `{"z": true}`, `9007199254740993`, `-0.0`, `1e300`} {
		f.Add(uint8(i), []byte(v))
	}
	type compiled struct {
		q    *quick
		full *schema
	}
	var all []compiled
	for _, src := range quickSchemas {
		d := &doc{}
		s, errs := compileSchema(d, "x", json.RawMessage(src), false)
		if errs != nil {
			f.Fatal(errs)
		}
		if s.quick == nil {
			f.Fatalf("%s: no quick form", src)
		}
		all = append(all, compiled{s.quick, s})
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		v, err := plainjson.Decode(data)
		if err != nil {
			return
		}
		c := all[int(which)%len(all)]
		if c.q.ok(v, 0) {
			if err := c.full.full.Validate(jsonValue(v)); err != nil {
				t.Fatalf("%s: quick passes %s, the validator says %v", quickSchemas[int(which)%len(all)], data, err)
			}
		}
	})
}

func compileExample(t *testing.T, name string) *Task {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "tasks", name))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}
