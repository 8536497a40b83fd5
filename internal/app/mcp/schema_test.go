package mcp

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

func TestPlainSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"type":["null","array"],"items":{"type":"string"}}`, `{"type":"array","items":{"type":"string"}}`},
		{`{"type":["object","null"],"properties":{"a":{"type":["null","integer"]}}}`, `{"type":"object","properties":{"a":{"type":"integer"}}}`},
		{`{"type":"object","additionalProperties":{"type":["null","array"],"items":{"type":["null","object"]}}}`,
			`{"type":"object","additionalProperties":{"type":"array","items":{"type":"object"}}}`},
		{`{"anyOf":[{"type":["null","string"]}],"$defs":{"d":{"type":["null","number"]}}}`, `{"anyOf":[{"type":"string"}],"$defs":{"d":{"type":"number"}}}`},
		// Unions of two real types are kept.
		{`{"type":["string","integer"]}`, `{"type":["string","integer"]}`},
		{`{"type":["null","string","integer"]}`, `{"type":["null","string","integer"]}`},
	} {
		var s jsonschema.Schema
		if err := json.Unmarshal([]byte(tc.in), &s); err != nil {
			t.Fatal(err)
		}
		plainSchema(&s)
		got, _ := json.Marshal(&s)
		var g, w any
		_ = json.Unmarshal(got, &g)
		_ = json.Unmarshal([]byte(tc.want), &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("plainSchema(%s) = %s; want %s", tc.in, got, tc.want)
		}
	}
}
