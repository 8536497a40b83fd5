package spec

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/makerfleet/makerfleet/schemas"
)

// printer words the schema validator's messages.
var printer = message.NewPrinter(language.English)

// specSchema is the task spec's JSON Schema (embedded in schemas),
// compiled once.
var specSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	raw, err := schemas.Schema(schemas.KindTaskSpec)
	if err != nil {
		return nil, err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	id := schemas.SchemaID(schemas.KindTaskSpec)
	if err := c.AddResource(id, v); err != nil {
		return nil, err
	}
	return c.Compile(id)
})

// checkShape checks the file against the spec's JSON Schema: fields,
// types, names, required parts. Every failing place is a problem.
func checkShape(d *doc) Errors {
	sch, err := specSchema()
	if err != nil {
		return Errors{{Msg: "the task spec schema does not compile: " + err.Error()}}
	}
	err = sch.Validate(jsonValue(d.value))
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return Errors{{Msg: err.Error()}}
	}
	var probs Errors
	seen := map[string]bool{}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		path := d.path(e.InstanceLocation)
		add := func(path, msg string) {
			if key := path + "\x00" + msg; !seen[key] {
				seen[key] = true
				probs = append(probs, d.problem(path, msg))
			}
		}
		switch k := e.ErrorKind.(type) {
		case *kind.AdditionalProperties:
			// Each unknown field at its own place in the file.
			for _, f := range k.Properties {
				add(join(path, f), "unknown field")
			}
		case *kind.Required:
			for _, f := range k.Missing {
				add(join(path, f), "missing (required)")
			}
		default:
			add(path, e.ErrorKind.LocalizedString(printer))
		}
	}
	walk(ve)
	return probs
}

// path turns a JSON pointer's tokens into the spec's path notation,
// telling list indices from keys by the document.
func (d *doc) path(tokens []string) string {
	path := ""
	cur := d.value
	for _, tok := range tokens {
		switch c := cur.(type) {
		case []any:
			i, _ := strconv.Atoi(tok)
			path = fmt.Sprintf("%s[%d]", path, i)
			if i >= 0 && i < len(c) {
				cur = c[i]
			} else {
				cur = nil
			}
		case map[string]any:
			path = join(path, tok)
			cur = c[tok]
		default:
			path = join(path, tok)
			cur = nil
		}
	}
	return path
}
