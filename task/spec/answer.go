package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/makerfleet/makerfleet/internal/plainjson"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// maxReply bounds the reply text the parser reads.
const maxReply = 256 << 10

// Group types of a regex answer.
var groupTypes = map[string]bool{"string": true, "int": true, "number": true, "bool": true, "json": true}

// reader reads a reply into an answer object.
type reader struct {
	format string
	re     *regexp.Regexp
	scan   *scanner          // re's matches
	groups map[string]string // group name → type
}

// read returns the answer in reply, or an error wrapping
// task.ErrMalformed: a red flag.
func (r *reader) read(reply string) (map[string]any, error) {
	if len(reply) > maxReply {
		return nil, fmt.Errorf("%w: reply longer than %d bytes", task.ErrMalformed, maxReply)
	}
	if r.format == schemas.AnswerJSON {
		obj, ok := lastObject(reply)
		if !ok {
			return nil, fmt.Errorf("%w: no JSON object in the reply", task.ErrMalformed)
		}
		return obj, nil
	}
	// The last capture of each named group, across every match: a reply
	// that reasons first and answers last is read by its answer.
	obj := map[string]any{}
	caps := map[string]string{}
	for _, m := range r.scan.all(reply) {
		for i, name := range r.re.SubexpNames() {
			if name != "" && m[2*i] >= 0 {
				caps[name] = reply[m[2*i]:m[2*i+1]]
			}
		}
	}
	for name, text := range caps {
		v, err := convertGroup(text, r.groups[name])
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", task.ErrMalformed, name, err)
		}
		obj[name] = v
	}
	if len(obj) == 0 {
		return nil, fmt.Errorf("%w: the reply does not match the answer pattern", task.ErrMalformed)
	}
	return obj, nil
}

func convertGroup(text, typ string) (any, error) {
	switch typ {
	case "int":
		return strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	case "number":
		return decodeJSONNumber(strings.TrimSpace(text))
	case "bool":
		return strconv.ParseBool(strings.TrimSpace(text))
	case "json":
		return plainjson.Decode([]byte(text))
	}
	return text, nil
}

func decodeJSONNumber(s string) (any, error) {
	v, err := plainjson.Decode([]byte(s))
	if err != nil {
		return nil, err
	}
	switch v.(type) {
	case int64, float64:
		return v, nil
	}
	return nil, fmt.Errorf("%q is not a number", s)
}

// lastObject returns the last top-level JSON object in s that parses.
// Braces inside strings of an object do not count; prose outside objects
// is skipped.
func lastObject(s string) (map[string]any, bool) {
	var last map[string]any
	depth, start := 0, -1
	inStr, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if depth > 0 && inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			if depth > 0 {
				inStr = true
			}
		case '{':
			if depth == 0 {
				start = i
			}
			depth++
			if depth > maxDepth {
				return last, last != nil
			}
		case '}':
			if depth == 0 {
				continue
			}
			depth--
			if depth == 0 && start >= 0 {
				if v, err := plainjson.Decode([]byte(s[start : i+1])); err == nil {
					if obj, ok := v.(map[string]any); ok {
						last = obj
					}
				}
				start = -1
			}
		}
	}
	return last, last != nil
}

// checkAnswer validates an answer object against the answer schema.
func checkAnswer(sch *schema, obj map[string]any) error {
	if err := sch.validate(obj); err != nil {
		return fmt.Errorf("%w: the answer does not fit the answer schema: %s", task.ErrMalformed, schemaMessage(err))
	}
	return nil
}

// jsonValue turns plain values into what the schema validator reads
// (json.Number for numbers, so integers stay integers).
func jsonValue(v any) any {
	switch x := v.(type) {
	case int64:
		return json.Number(strconv.FormatInt(x, 10))
	case float64:
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	}
	return v
}

// schemaMessage is a validation error in one line: each failing location
// and why.
func schemaMessage(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var parts []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			at := "/" + strings.Join(e.InstanceLocation, "/")
			parts = append(parts, at+": "+e.ErrorKind.LocalizedString(printer))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(parts) > 5 {
		parts = append(parts[:5], fmt.Sprintf("and %d more", len(parts)-5))
	}
	return strings.Join(parts, "; ")
}

// redFlag is a red flag expression.
type redFlag struct {
	name string
	when *expr
}

// voteKey is the canonical JSON of the answer's vote fields.
func (t *Task) voteKey(obj map[string]any) (string, error) {
	v := obj
	if len(t.vote) > 0 {
		v = make(map[string]any, len(t.vote))
		for _, f := range t.vote {
			val, ok := obj[f]
			if !ok {
				return "", fmt.Errorf("%w: the answer has no %q, a vote field", task.ErrMalformed, f)
			}
			v[f] = val
		}
	}
	b, err := plainjson.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%w: %v", task.ErrMalformed, err)
	}
	return string(b), nil
}
