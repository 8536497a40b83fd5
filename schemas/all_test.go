package schemas_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

func TestSchemasCompile(t *testing.T) {
	t.Parallel()
	if len(committedSchemas(t)) != len(schemas.All()) {
		t.Error("a kind has no schema")
	}
}

func TestAll(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for _, mt := range schemas.All() {
		if seen[mt.Kind] {
			t.Errorf("%s listed twice", mt.Kind)
		}
		seen[mt.Kind] = true
		a, b := mt.New(), mt.New()
		if a.MessageKind() != mt.Kind {
			t.Errorf("%s: New returns a %s", mt.Kind, a.MessageKind())
		}
		if a == b || !reflect.ValueOf(a).Elem().IsZero() {
			t.Errorf("%s: New must return a fresh zero value", mt.Kind)
		}
	}
	all := schemas.All()
	all[0].Kind = "changed"
	if schemas.All()[0].Kind == "changed" {
		t.Error("All shares its slice")
	}
}

// Every kind's schema is embedded, and Schema refuses a kind it has none of.
func TestSchemaEmbedded(t *testing.T) {
	t.Parallel()
	for _, kind := range append(kindsOf(schemas.All()), schemas.KindTaskSpec) {
		b, err := schemas.Schema(kind)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if !bytes.Contains(b, []byte(schemas.SchemaID(kind))) {
			t.Errorf("%s: the embedded schema does not carry its $id", kind)
		}
	}
	for _, bad := range []string{"", "nope", "../schemas", "job_spec.schema.json", "*"} {
		if _, err := schemas.Schema(bad); !errors.Is(err, schemas.ErrKind) {
			t.Errorf("Schema(%q) = %v, want ErrKind", bad, err)
		}
	}
}

func kindsOf(mts []schemas.MessageType) []string {
	out := make([]string, 0, len(mts))
	for _, mt := range mts {
		out = append(out, mt.Kind)
	}
	return out
}
