package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/makerfleet/makerfleet/internal/plainjson"
	"github.com/makerfleet/makerfleet/task"
)

// maxRendered bounds what one template may write.
const maxRendered = 256 << 10

// funcs are the functions a spec's templates may call: formatting and
// integer arithmetic, nothing that reaches outside the template.
var funcs = template.FuncMap{
	"json":  toJSON,
	"plain": plain,
	"add":   arith(func(a, b int64) (int64, error) { return a + b, nil }),
	"sub":   arith(func(a, b int64) (int64, error) { return a - b, nil }),
	"mul":   arith(func(a, b int64) (int64, error) { return a * b, nil }),
	"div": arith(func(a, b int64) (int64, error) {
		if b == 0 {
			return 0, errors.New("division by zero")
		}
		return a / b, nil
	}),
	"mod": arith(func(a, b int64) (int64, error) {
		if b == 0 {
			return 0, errors.New("modulo by zero")
		}
		return a % b, nil
	}),
	// at is the i-th character of a string (as a string) or the i-th item
	// of a list.
	"at": func(v any, i any) (any, error) {
		n, ok := i.(int64)
		if !ok {
			if x, isInt := i.(int); isInt {
				n, ok = int64(x), true
			}
		}
		if !ok {
			return nil, fmt.Errorf("at: want an integer position, got %s", describeValue(i))
		}
		switch x := v.(type) {
		case string:
			r := []rune(x)
			if n < 0 || n >= int64(len(r)) {
				return nil, fmt.Errorf("at: position %d outside a string of %d characters", n, len(r))
			}
			return string(r[n]), nil
		case []any:
			if n < 0 || n >= int64(len(x)) {
				return nil, fmt.Errorf("at: position %d outside a list of %d", n, len(x))
			}
			return x[n], nil
		}
		return nil, fmt.Errorf("at: want a string or a list, got %s", describeValue(v))
	},
	// get reads an optional key: nil when the object has none (a plain
	// .key on a missing key is an error).
	"get": func(obj any, key string) (any, error) {
		m, ok := obj.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("get: want an object, got %s", describeValue(obj))
		}
		return m[key], nil
	},
	"join": func(sep string, v any) (string, error) {
		list, ok := v.([]any)
		if !ok {
			return "", fmt.Errorf("join: want a list, got %s", describeValue(v))
		}
		parts := make([]string, len(list))
		for i, e := range list {
			if s, ok := e.(string); ok {
				parts[i] = s
			} else {
				b, err := plainjson.Marshal(e)
				if err != nil {
					return "", err
				}
				parts[i] = string(b)
			}
		}
		return strings.Join(parts, sep), nil
	},
}

func arith(f func(a, b int64) (int64, error)) func(a, b any) (int64, error) {
	return func(a, b any) (int64, error) {
		x, ok1 := a.(int64)
		y, ok2 := b.(int64)
		if !ok1 || !ok2 {
			// Template literals are int; values from params are int64.
			if i, ok := a.(int); ok {
				x, ok1 = int64(i), true
			}
			if i, ok := b.(int); ok {
				y, ok2 = int64(i), true
			}
		}
		if !ok1 || !ok2 {
			return 0, fmt.Errorf("arithmetic on %s and %s: want integers", describeValue(a), describeValue(b))
		}
		return f(x, y)
	}
}

// toJSON is v as canonical JSON.
func toJSON(v any) (string, error) {
	b, err := plainjson.Marshal(v)
	return string(b), err
}

// plain is v as JSON with ", " between the items of lists and objects
// (and ": " after keys): [[3, 2, 1], [], []], as people and the paper's
// prompts write lists.
func plain(v any) (string, error) {
	var b strings.Builder
	if err := writePlain(&b, v, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writePlain(b *strings.Builder, v any, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("value nested more than %d deep", maxDepth)
	}
	switch x := v.(type) {
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := writePlain(b, e, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Quote(k))
			b.WriteString(": ")
			if err := writePlain(b, x[k], depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		enc, err := json.Marshal(x)
		if err != nil {
			return err
		}
		b.Write(enc)
	}
	return nil
}

// tmpl is a compiled template.
type tmpl struct {
	name string
	t    *template.Template
	// stateFree: nothing in it can read the state, so for one instance it
	// always writes the same text (a system prompt, usually).
	stateFree bool
}

// compileTemplate parses src, reporting problems at path.
func compileTemplate(d *doc, path, src string) (*tmpl, Errors) {
	t, err := template.New(path).Funcs(funcs).Option("missingkey=error").Parse(src)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "template: ")
		return nil, Errors{d.problem(path, "template: "+msg)}
	}
	free := true
	for _, x := range t.Templates() {
		if x.Tree != nil && mayReadState(x.Tree.Root) {
			free = false
		}
	}
	return &tmpl{name: path, t: t, stateFree: free}, nil
}

// mayReadState reports whether a template node might read the state:
// a field path starting at state (.state, $.state), or the data as a whole
// (a bare . or $, which a function such as get could look into). It errs
// on the side of yes: a .state inside {{with .params}} counts.
func mayReadState(n parse.Node) bool {
	switch x := n.(type) {
	case nil:
		return false
	case *parse.ListNode:
		if x == nil {
			return false
		}
		for _, c := range x.Nodes {
			if mayReadState(c) {
				return true
			}
		}
		return false
	case *parse.ActionNode:
		return mayReadState(x.Pipe)
	case *parse.IfNode:
		return mayReadState(x.Pipe) || mayReadState(x.List) || mayReadState(x.ElseList)
	case *parse.RangeNode:
		return mayReadState(x.Pipe) || mayReadState(x.List) || mayReadState(x.ElseList)
	case *parse.WithNode:
		return mayReadState(x.Pipe) || mayReadState(x.List) || mayReadState(x.ElseList)
	case *parse.TemplateNode:
		return true // what it is handed is read by another tree
	case *parse.PipeNode:
		if x == nil {
			return false
		}
		for _, c := range x.Cmds {
			if mayReadState(c) {
				return true
			}
		}
		return false
	case *parse.CommandNode:
		for _, a := range x.Args {
			if mayReadState(a) {
				return true
			}
		}
		return false
	case *parse.ChainNode:
		return mayReadState(x.Node)
	case *parse.DotNode:
		return true
	case *parse.FieldNode:
		return len(x.Ident) > 0 && x.Ident[0] == varState
	case *parse.VariableNode:
		return len(x.Ident) == 1 && x.Ident[0] == "$" || len(x.Ident) > 1 && x.Ident[0] == "$" && x.Ident[1] == varState
	case *parse.TextNode, *parse.CommentNode, *parse.IdentifierNode, *parse.BoolNode,
		*parse.NumberNode, *parse.StringNode, *parse.NilNode, *parse.BreakNode, *parse.ContinueNode:
		return false
	}
	return true // a node kind this does not know
}

// render runs the template on data.
func (t *tmpl) render(data map[string]any) (string, error) {
	if t == nil {
		return "", nil
	}
	var b limitedBuffer
	if err := t.t.Execute(&b, data); err != nil {
		// Go's message names the template and the place in it, mostly.
		msg := strings.TrimPrefix(err.Error(), "template: ")
		if !strings.HasPrefix(msg, t.name) {
			msg = t.name + ": " + msg
		}
		return "", fmt.Errorf("%w: %s", task.ErrEval, msg)
	}
	return b.String(), nil
}

// limitedBuffer refuses to grow past maxRendered.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > maxRendered {
		return 0, fmt.Errorf("output longer than %d bytes", maxRendered)
	}
	return b.Buffer.Write(p)
}
