// Command gen writes the API's OpenAPI document (api.OpenAPI) to a file;
// go generate in internal/api runs it to write docs/openapi.json.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/makerfleet/makerfleet/internal/api"
)

func main() {
	out := flag.String("out", "openapi.json", "the file to write")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// run writes the document to path unless path already holds it.
func run(path string) error {
	doc, err := api.OpenAPI()
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, doc) {
		return nil
	}
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}
