package tsgen

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestTypeOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, schema, want string
	}{
		{"ref", `{"$ref": "#/components/schemas/JobView", "description": "d"}`, "JobView"},
		{"string", `{"type": "string", "pattern": "^a$"}`, "string"},
		{"integer", `{"type": "integer", "minimum": 0}`, "number"},
		{"nullable", `{"type": ["string", "null"]}`, "string | null"},
		{"enum", `{"type": "string", "enum": ["", "on", "off"]}`, `"" | "on" | "off"`},
		{"const", `{"type": "integer", "const": 1}`, "1"},
		{"array", `{"type": "array", "items": {"$ref": "#/components/schemas/Bucket"}}`, "Bucket[]"},
		{"array of union", `{"type": "array", "items": {"type": ["string", "null"]}}`, "(string | null)[]"},
		{"anyOf", `{"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}`, "string[] | null"},
		{"open object", `{"type": "object"}`, "{ [key: string]: unknown }"},
		{"closed empty object", `{"type": "object", "additionalProperties": false}`, "Record<string, never>"},
		{"map", `{"type": "object", "additionalProperties": {"type": "integer"}}`, "{ [key: string]: number }"},
		{"no type", `{"description": "anything"}`, "unknown"},
		{"object", `{"type": "object", "required": ["b"], "properties": {"b": {"type": "boolean"}, "a-b": {"type": "string", "description": "x */ y"}}}`,
			"{\n  /** x *\\/ y */\n  \"a-b\"?: string;\n  b: boolean;\n}"},
	} {
		var s schema
		if err := json.Unmarshal([]byte(tc.schema), &s); err != nil {
			t.Fatal(err)
		}
		got, err := typeOf(&s, "")
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func TestGenerate(t *testing.T) {
	t.Parallel()
	out, err := Generate([]byte(`{"info": {"title": "t", "version": "v1"}, "components": {"schemas": {
		"B": {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/A"}}, "required": ["a"], "additionalProperties": false},
		"A": {"type": "string", "enum": ["x"], "description": "A is x."}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Header + "// t, version v1.\n\n/** A is x. */\nexport type A = \"x\";\n\nexport interface B {\n  a: A;\n}\n\n" +
		"/** The names of the component schemas. */\nexport type SchemaName =\n  | \"A\"\n  | \"B\";\n"
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	for _, bad := range []string{
		`{`,
		`{"components": {"schemas": {}}}`,
		`{"components": {"schemas": {"a-b": {"type": "string"}}}}`,
		`{"components": {"schemas": {"A": {"$ref": "https://elsewhere/x"}}}}`,
		`{"components": {"schemas": {"A": {"type": "bogus"}}}}`,
		`{"components": {"schemas": {"A": {"enum": [{"x": 1}]}}}}`,
	} {
		if _, err := Generate([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "tsgen: ") {
			t.Errorf("Generate(%s): %v, want an error", bad, err)
		}
	}
}

// FuzzGenerate: any document is types or an error, never a panic, and a
// schema name is never written unless it is an identifier.
func FuzzGenerate(f *testing.F) {
	f.Add([]byte(`{"components": {"schemas": {"A": {"type": ["object", "null"], "properties": {"x": {"items": {}}}}}}}`))
	f.Add([]byte(`{"components": {"schemas": {"A": {"anyOf": [{"const": "a"}, {"oneOf": [{"type": "array"}]}]}}}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		out, err := Generate(doc)
		if err == nil && !strings.HasPrefix(string(out), Header) {
			t.Fatalf("no header: %q", out)
		}
	})
}
