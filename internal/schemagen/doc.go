// Package schemagen builds the JSON Schemas of the wire types (package
// schemas) by reflection, with their doc comments as descriptions and the
// one-field rules of Validate, and the components of the API's OpenAPI
// document. It runs when the files are generated (go generate ./schemas,
// ./internal/api; make generate) and in the tests that check the committed
// files are current, never in the binary: schemas embeds the files and
// internal/api its document.
//
// docs_gen.go holds schemas' doc comments (written by gen -docs) so that
// the reflector can read them without the Go source.
package schemagen
