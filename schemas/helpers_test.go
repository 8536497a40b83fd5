package schemas_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/makerfleet/makerfleet/schemas"
)

// newMessage returns a zero message of kind.
func newMessage(t testing.TB, kind string) schemas.Message {
	t.Helper()
	for _, mt := range schemas.All() {
		if mt.Kind == kind {
			return mt.New()
		}
	}
	t.Fatalf("no kind %q", kind)
	return nil
}

func golden(t testing.TB, kind string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", kind+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeGolden returns a fresh decoded copy of kind's golden message.
func decodeGolden(t testing.TB, kind string) schemas.Message {
	t.Helper()
	m := newMessage(t, kind)
	if err := schemas.Decode(golden(t, kind), m); err != nil {
		t.Fatalf("golden %s: %v", kind, err)
	}
	return m
}

var (
	compileOnce sync.Once
	compiled    map[string]*jsonschema.Schema
	compileErr  error
)

// committedSchemas compiles the committed jsonschema/*.schema.json files,
// asserting formats (date-time) too.
func committedSchemas(t testing.TB) map[string]*jsonschema.Schema {
	t.Helper()
	compileOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		out := make(map[string]*jsonschema.Schema)
		for _, mt := range schemas.All() {
			path := filepath.Join("jsonschema", mt.Kind+".schema.json")
			f, err := os.Open(path)
			if err != nil {
				compileErr = err
				return
			}
			doc, err := jsonschema.UnmarshalJSON(f)
			f.Close()
			if err != nil {
				compileErr = fmt.Errorf("%s: %w", path, err)
				return
			}
			if err := c.AddResource(schemas.SchemaID(mt.Kind), doc); err != nil {
				compileErr = err
				return
			}
			if out[mt.Kind], err = c.Compile(schemas.SchemaID(mt.Kind)); err != nil {
				compileErr = fmt.Errorf("%s: %w", path, err)
				return
			}
		}
		compiled = out
	})
	if compileErr != nil {
		t.Fatal(compileErr)
	}
	return compiled
}

// validateSchema validates JSON data against kind's committed schema.
func validateSchema(t testing.TB, kind string, data []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return committedSchemas(t)[kind].Validate(inst)
}

// jsonValue decodes data keeping number literals, for comparing documents
// by meaning rather than by bytes.
func jsonValue(t testing.TB, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%v in %s", err, data)
	}
	return v
}

// normalized returns a copy of m in which values that mean the same compare
// equal under reflect.DeepEqual: raw JSON re-encoded (null for nil, as
// Encode writes it), times in UTC, empty omitempty slices and maps nil (in
// nested structs too, and anywhere in a journal entry's work, which leaves
// every zero field out).
func normalized(t testing.TB, m schemas.Message) schemas.Message {
	t.Helper()
	v := reflect.New(reflect.TypeOf(m).Elem())
	v.Elem().Set(reflect.ValueOf(m).Elem())
	normalizeStruct(t, v.Elem(), false)
	return v.Interface().(schemas.Message)
}

func normalizeStruct(t testing.TB, s reflect.Value, omitAll bool) {
	for i := range s.NumField() {
		f, sf := s.Field(i), s.Type().Field(i)
		switch {
		case sf.Type == reflect.TypeFor[json.RawMessage]():
			raw := f.Bytes()
			if len(raw) == 0 {
				raw = []byte("null")
			}
			b, err := json.Marshal(jsonValue(t, raw))
			if err != nil {
				t.Fatal(err)
			}
			f.SetBytes(b)
		case sf.Type == reflect.TypeFor[time.Time]():
			f.Set(reflect.ValueOf(f.Interface().(time.Time).UTC().Round(0)))
		case f.Kind() == reflect.Struct:
			normalizeStruct(t, f, omitAll || sf.Type == reflect.TypeFor[schemas.Delta]())
		case (f.Kind() == reflect.Slice || f.Kind() == reflect.Map) && f.Len() == 0 &&
			(omitAll || strings.Contains(sf.Tag.Get("json"), ",omitempty")):
			f.SetZero()
		}
	}
}
