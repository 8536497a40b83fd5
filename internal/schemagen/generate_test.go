package schemagen_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/schemagen"
	"github.com/makerfleet/makerfleet/internal/schemagen/docmap"
	"github.com/makerfleet/makerfleet/schemas"
)

const regenerate = "run `make generate` (go generate ./schemas/...) and commit the result"

// schemaDir is the schemas package, whose jsonschema/ holds the committed files.
const schemaDir = "../../schemas"

// The committed generated files are what the generator writes today.
func TestGeneratedFilesUpToDate(t *testing.T) {
	t.Parallel()
	docs, err := docmap.Source(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameFile(docmap.File, docs); err != nil {
		// The schemas below are built from the committed docs, so stop here.
		t.Fatalf("%v\n%s", err, regenerate)
	}

	got, err := schemagen.Schemas()
	if err != nil {
		t.Fatal(err)
	}
	for kind, b := range got {
		if err := sameFile(filepath.Join(schemaDir, "jsonschema", kind+".schema.json"), b); err != nil {
			t.Errorf("%v\n%s", err, regenerate)
		}
	}
	files, err := filepath.Glob(filepath.Join(schemaDir, "jsonschema", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := got[strings.TrimSuffix(filepath.Base(f), ".schema.json")]; !ok {
			t.Errorf("%s belongs to no kind\n%s", f, regenerate)
		}
	}
}

// sameFile reports how path differs from want.
func sameFile(path string, want []byte) error {
	have, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if bytes.Equal(have, want) {
		return nil
	}
	hl, wl := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(hl), len(wl)); i++ {
		var h, w string
		if i < len(hl) {
			h = hl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if h != w {
			return fmt.Errorf("%s is stale at line %d:\n  committed: %s\n  generated: %s", path, i+1, h, w)
		}
	}
	return fmt.Errorf("%s is stale", path)
}

func TestSchemasDeterministic(t *testing.T) {
	t.Parallel()
	a, err := schemagen.Schemas()
	if err != nil {
		t.Fatal(err)
	}
	b, err := schemagen.Schemas()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("two calls of Schemas differ")
	}
	for kind, s := range a {
		if !bytes.HasSuffix(s, []byte("}\n")) {
			t.Errorf("%s: no trailing newline", kind)
		}
	}
}

// The schema's shape follows the Go type: $id, title, the version and kind
// constants, one property per JSON field, and required exactly for the
// fields without omitempty.
func TestSchemaShape(t *testing.T) {
	t.Parallel()
	all, err := schemagen.Schemas()
	if err != nil {
		t.Fatal(err)
	}
	for _, mt := range schemas.All() {
		t.Run(mt.Kind, func(t *testing.T) {
			var s struct {
				Schema     string                     `json:"$schema"`
				ID         string                     `json:"$id"`
				Title      string                     `json:"title"`
				Desc       string                     `json:"description"`
				Props      map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
				Additional *bool                      `json:"additionalProperties"`
			}
			if err := json.Unmarshal(all[mt.Kind], &s); err != nil {
				t.Fatal(err)
			}
			typ := reflect.TypeOf(mt.New()).Elem()
			if s.Schema != "https://json-schema.org/draft/2020-12/schema" {
				t.Errorf("$schema = %q", s.Schema)
			}
			if want := "https://makerfleet.dev/schemas/v1/" + mt.Kind + ".schema.json"; s.ID != want {
				t.Errorf("$id = %q, want %q", s.ID, want)
			}
			if s.Title != typ.Name() || s.Desc == "" {
				t.Errorf("title %q, description %q: want %s and its doc comment", s.Title, s.Desc, typ.Name())
			}
			if s.Additional == nil || *s.Additional {
				t.Error("additionalProperties is not false")
			}
			var version, kind struct {
				Const any `json:"const"`
			}
			_ = json.Unmarshal(s.Props["version"], &version)
			_ = json.Unmarshal(s.Props["kind"], &kind)
			if version.Const != float64(schemas.Version) || kind.Const != mt.Kind {
				t.Errorf("consts: version %v, kind %v", version.Const, kind.Const)
			}

			var names, required []string
			for f := range typ.Fields() {
				walkJSONFields(f, func(name string, omitempty bool) {
					names = append(names, name)
					if !omitempty {
						required = append(required, name)
					}
				})
			}
			props := make([]string, 0, len(s.Props))
			for p := range s.Props {
				props = append(props, p)
			}
			slices.Sort(names)
			slices.Sort(props)
			if !slices.Equal(names, props) {
				t.Errorf("properties %v, want %v", props, names)
			}
			slices.Sort(required)
			slices.Sort(s.Required)
			if !slices.Equal(required, s.Required) {
				t.Errorf("required %v, want %v", s.Required, required)
			}
			for name, p := range s.Props {
				if !bytes.Contains(p, []byte(`"description"`)) {
					t.Errorf("%s has no description: give its Go field a doc comment", name)
				}
			}
		})
	}
}

// walkJSONFields calls fn for each JSON field f yields, embedded structs
// flattened.
func walkJSONFields(f reflect.StructField, fn func(name string, omitempty bool)) {
	name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	if f.Anonymous && name == "" {
		for g := range f.Type.Fields() {
			walkJSONFields(g, fn)
		}
		return
	}
	fn(name, slices.Contains(strings.Split(opts, ","), "omitempty"))
}
