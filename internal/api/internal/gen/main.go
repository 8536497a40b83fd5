// Command gen builds the API's OpenAPI document (api.BuildOpenAPI, with
// schemagen's components) and writes it to each -out file; go generate in
// internal/api runs it to write the embedded openapi.json and
// docs/openapi.json.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/schemagen"
)

func main() {
	var outs []string
	flag.Func("out", "a file to write (repeatable)", func(p string) error { outs = append(outs, p); return nil })
	flag.Parse()
	if len(outs) == 0 {
		outs = []string{"openapi.json"}
	}
	if err := run(outs); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// run writes the document to each path unless the path already holds it.
func run(paths []string) error {
	doc, err := api.BuildOpenAPI(schemagen.OpenAPIComponents)
	if err != nil {
		return err
	}
	for _, path := range paths {
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, doc) {
			continue
		}
		if err := os.WriteFile(path, doc, 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}
