// Command gen writes the generated files of the wire schemas. Run it from
// the schemas package directory (go generate ./schemas does):
//
//	go run ../internal/schemagen/gen -docs  # schemagen's docs_gen.go, from schemas' doc comments
//	go run ../internal/schemagen/gen        # schemas/jsonschema/<kind>.schema.json
//
// Two runs, because the second must be compiled with the docs the first
// wrote.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/makerfleet/makerfleet/internal/schemagen"
	"github.com/makerfleet/makerfleet/internal/schemagen/docmap"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	docs := fs.Bool("docs", false, "write "+docmap.File+" instead of the schema files")
	dir := fs.String("dir", ".", "the schemas package directory")
	docsDir := fs.String("docs-dir", "../internal/schemagen", "where "+docmap.File+" goes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *docs {
		src, err := docmap.Source(*dir)
		if err != nil {
			return err
		}
		return write(stdout, filepath.Join(*docsDir, docmap.File), src)
	}

	files, err := schemagen.Schemas()
	if err != nil {
		return err
	}
	out := filepath.Join(*dir, "jsonschema")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	// A kind that is gone must not leave its schema behind.
	old, err := filepath.Glob(filepath.Join(out, "*.schema.json"))
	if err != nil {
		return err
	}
	for _, path := range old {
		if _, ok := files[strings.TrimSuffix(filepath.Base(path), ".schema.json")]; !ok {
			if err := os.Remove(path); err != nil {
				return err
			}
			fmt.Fprintln(stdout, "removed", path)
		}
	}
	kinds := make([]string, 0, len(files))
	for k := range files {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		if err := write(stdout, filepath.Join(out, k+".schema.json"), files[k]); err != nil {
			return err
		}
	}
	return nil
}

// write writes data to path unless path already holds it, so a run that
// changes nothing leaves file times alone.
func write(stdout io.Writer, path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "wrote", path)
	return nil
}
