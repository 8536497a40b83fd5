// Command gen writes the TypeScript client's types from the API's OpenAPI
// document: built as internal/api builds docs/openapi.json (so go generate
// needs no other package to run first), or read from -in.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/makerfleet/makerfleet/clients/internal/tsgen"
	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/schemagen"
)

func main() {
	in := flag.String("in", "", "the OpenAPI document to read (default: build it)")
	out := flag.String("out", "typescript/src/openapi.ts", "the file to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	var doc []byte
	var err error
	if in != "" {
		doc, err = os.ReadFile(in)
	} else {
		doc, err = api.BuildOpenAPI(schemagen.OpenAPIComponents)
	}
	if err != nil {
		return err
	}
	ts, err := tsgen.Generate(doc)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(out); err == nil && bytes.Equal(old, ts) {
		return nil
	}
	if err := os.WriteFile(out, ts, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", out)
	return nil
}
