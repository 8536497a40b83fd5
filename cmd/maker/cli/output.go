package cli

import (
	"encoding/json"
	"io"
)

// writeJSON writes v as --json prints every result: indented two spaces,
// one value, a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// output prints v as JSON with --json, else as text writes it.
func output(w io.Writer, asJSON bool, v any, text func(io.Writer)) error {
	if asJSON {
		return writeJSON(w, v)
	}
	text(w)
	return nil
}
