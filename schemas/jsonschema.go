package schemas

import (
	"embed"
	"fmt"
)

// The schema files are generated from the Go types by internal/schemagen
// (reflection, doc comments and the rules below Validate) and committed;
// the binary embeds them and never builds them at run time. The first run
// writes schemagen's docs from this package's doc comments; the second is
// compiled with them and writes jsonschema/*.schema.json.
//go:generate go run ../internal/schemagen/gen -docs
//go:generate go run ../internal/schemagen/gen

//go:embed jsonschema/*.schema.json
var schemaFiles embed.FS

// SchemaID returns the $id of kind's JSON Schema.
func SchemaID(kind string) string {
	return "https://makerfleet.dev/schemas/v1/" + kind + ".schema.json"
}

// KindTaskSpec names the task spec file's schema. A spec is a document
// people write, not a bus message: it has no header (its version is its
// own), so it is not among All.
const KindTaskSpec = "task_spec"

// Schema returns the JSON Schema (draft 2020-12) of kind (a kind of All,
// or KindTaskSpec): the committed jsonschema/<kind>.schema.json.
//
// A schema describes a message as Encode writes it and checks every rule
// that concerns one field, plus the outcome and state conditionals; rules
// that tie numbers together (sample_id, lead <= votes, max_samples_per_step
// >= k) are Validate's alone.
func Schema(kind string) ([]byte, error) {
	b, err := schemaFiles.ReadFile("jsonschema/" + kind + ".schema.json")
	if err != nil {
		return nil, fmt.Errorf("%w: no JSON Schema for kind %q", ErrKind, kind)
	}
	return b, nil
}
