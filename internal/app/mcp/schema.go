package mcp

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/makerfleet/makerfleet/schemas"
)

// The tools' schemas. Input schemas are inferred from the argument structs
// (jsonschema.For) and made plain: For types a slice or a pointer as
// ["null","array"] / ["null","object"], and tool callers that coerce
// arguments by the declared type (the MCP Inspector CLI) then send an
// object or an array as a string. An omitted argument is the zero value,
// so null adds nothing: plainSchema keeps the other type alone.
//
// Output schemas are the wire types' generated JSON Schemas
// (schemas.Schema, the files in schemas/jsonschema), so structuredContent
// is exactly the message the fleet stores, checked by the same schema.

// inputSchema returns T's plain input schema.
func inputSchema[T any]() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, fmt.Errorf("mcp: input schema: %w", err)
	}
	plainSchema(s)
	return s, nil
}

// plainSchema replaces every type union of one type and "null" in s, at
// any depth, by that type alone.
func plainSchema(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && slices.Contains(s.Types, "null") {
		i := slices.Index(s.Types, "null")
		s.Type, s.Types = s.Types[1-i], nil
	}
	for _, m := range []map[string]*jsonschema.Schema{s.Properties, s.PatternProperties, s.Defs, s.Definitions} {
		for p := range maps.Values(m) {
			plainSchema(p)
		}
	}
	for _, list := range [][]*jsonschema.Schema{s.PrefixItems, s.ItemsArray, s.AllOf, s.AnyOf, s.OneOf} {
		for _, p := range list {
			plainSchema(p)
		}
	}
	for _, p := range []*jsonschema.Schema{s.Items, s.AdditionalProperties, s.Contains, s.Not, s.If, s.Then, s.Else} {
		plainSchema(p)
	}
}

// outputSchema returns the generated JSON Schema of a message kind as a
// tool's output schema, without $schema and $id: clients compile it with
// their own validator's default draft (the TypeScript SDK's Ajv knows no
// 2020-12 meta-schema), and compiling the same $id twice is an error in
// some of them. The keywords used (type, properties, required, enum,
// const, pattern, anyOf, allOf/if/then, $defs/$ref) mean the same in
// draft-07 and 2020-12.
func outputSchema(kind string) (map[string]any, error) {
	data, err := schemas.Schema(kind)
	if err != nil {
		return nil, fmt.Errorf("mcp: output schema: %w", err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("mcp: output schema %s: %w", kind, err)
	}
	delete(s, "$schema")
	delete(s, "$id")
	return s, nil
}

// schemaPattern returns the pattern of property name in schema s ("" when
// it has none).
func schemaPattern(s map[string]any, name string) string {
	props, _ := s["properties"].(map[string]any)
	prop, _ := props[name].(map[string]any)
	p, _ := prop["pattern"].(string)
	return p
}
