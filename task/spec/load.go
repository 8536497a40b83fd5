package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/makerfleet/makerfleet/internal/plainjson"
	"github.com/makerfleet/makerfleet/schemas"
)

// ErrInvalid marks a spec that does not compile; the error is an Errors
// listing every problem.
var ErrInvalid = errors.New("spec: invalid task spec")

// Problem is one thing wrong with a spec: where (a path like
// "answer.schema" or "red_flags[1].when", and the line and column in the
// file when known) and what.
type Problem struct {
	Path   string `json:"path"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	Msg    string `json:"message"`
}

func (p Problem) String() string {
	at := p.Path
	if at == "" {
		at = "(spec)"
	}
	switch {
	case p.Line > 0 && p.Column > 0:
		at = fmt.Sprintf("%s (line %d, column %d)", at, p.Line, p.Column)
	case p.Line > 0: // a YAML syntax error says its line only
		at = fmt.Sprintf("%s (line %d)", at, p.Line)
	}
	return at + ": " + p.Msg
}

// Errors are every problem found in a spec, in file order.
type Errors []Problem

func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, p := range e {
		lines[i] = p.String()
	}
	return fmt.Sprintf("%s: %d problem(s):\n  %s", ErrInvalid.Error(), len(e), strings.Join(lines, "\n  "))
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e Errors) Unwrap() error { return ErrInvalid }

// doc is a spec file read into plain JSON values, with the position of
// every value by its path.
type doc struct {
	value any
	pos   map[string][2]int // path → line, column
	// strs are the string values' own positions and styles, by path
	// (pos holds a field's key's): where an expression's error is in
	// the file (exprPos).
	strs  map[string]strPos
	lines []string // the source, by line (1 is lines[0])
}

// strPos is where a string value starts and how it is written.
type strPos struct {
	line, col int
	style     yaml.Style
}

// problem records msg at path, with the position the file has for it (or
// for the nearest parent that has one).
func (d *doc) problem(path, msg string) Problem {
	p := Problem{Path: path, Msg: msg}
	for q := path; ; {
		if lc, ok := d.pos[q]; ok {
			p.Line, p.Column = lc[0], lc[1]
			break
		}
		i := strings.LastIndexAny(q, ".[")
		if i < 0 {
			if lc, ok := d.pos[""]; ok && q != "" {
				p.Line, p.Column = lc[0], lc[1]
			}
			break
		}
		q = q[:i]
	}
	return p
}

// load reads YAML or JSON (JSON is YAML) into plain values: objects with
// string keys, lists, strings, bools, null, int64 for integers and float64
// for other numbers.
func load(src []byte) (*doc, error) {
	if len(src) > schemas.MaxTaskSpecBytes {
		return nil, Errors{{Msg: fmt.Sprintf("the spec is %d bytes, over the %d-byte limit", len(src), schemas.MaxTaskSpecBytes)}}
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(src))
	if err := dec.Decode(&root); err != nil {
		return nil, Errors{yamlProblem(err)}
	}
	// What follows the spec must be nothing: not a second document, and
	// not text that does not parse (after a flow mapping, the first
	// document's decoding does not look at it).
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, Errors{{Line: extra.Line, Column: extra.Column, Msg: "more than one document in the file"}}
	case !errors.Is(err, io.EOF):
		return nil, Errors{yamlProblem(err)}
	}
	d := &doc{pos: map[string][2]int{}, strs: map[string]strPos{}, lines: strings.Split(string(src), "\n")}
	var probs Errors
	n := &root
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	d.value = d.node(n, "", 0, &probs)
	if len(probs) > 0 {
		return nil, probs
	}
	return d, nil
}

// yamlProblem turns a YAML syntax error into a problem, with its line when
// the message has one.
func yamlProblem(err error) Problem {
	msg := err.Error()
	p := Problem{Msg: "not valid YAML or JSON: " + strings.TrimPrefix(msg, "yaml: ")}
	if i := strings.Index(msg, "line "); i >= 0 {
		rest := msg[i+5:]
		j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		if j < 0 {
			j = len(rest)
		}
		p.Line, _ = strconv.Atoi(rest[:j])
	}
	return p
}

// maxDepth bounds nesting, so a hostile file cannot make the reader
// recurse without end: as deep as JSON values go anywhere in a spec task.
const maxDepth = plainjson.MaxDepth

func (d *doc) node(n *yaml.Node, path string, depth int, probs *Errors) any {
	d.pos[path] = [2]int{n.Line, n.Column}
	if depth > maxDepth {
		*probs = append(*probs, d.problem(path, fmt.Sprintf("nested more than %d deep", maxDepth)))
		return nil
	}
	switch n.Kind {
	case yaml.AliasNode:
		*probs = append(*probs, d.problem(path, "aliases (*name) are not allowed in a task spec"))
		return nil
	case yaml.MappingNode:
		obj := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" && k.ShortTag() != "!!int" && k.ShortTag() != "!!bool" {
				*probs = append(*probs, Problem{Path: path, Line: k.Line, Column: k.Column, Msg: "keys must be strings"})
				continue
			}
			if k.Value == "<<" {
				*probs = append(*probs, Problem{Path: path, Line: k.Line, Column: k.Column, Msg: "merge keys (<<) are not allowed in a task spec"})
				continue
			}
			if _, dup := obj[k.Value]; dup {
				*probs = append(*probs, Problem{Path: join(path, k.Value), Line: k.Line, Column: k.Column, Msg: "key given twice"})
				continue
			}
			obj[k.Value] = d.node(v, join(path, k.Value), depth+1, probs)
			// A field is found by its key: point there.
			d.pos[join(path, k.Value)] = [2]int{k.Line, k.Column}
		}
		return obj
	case yaml.SequenceNode:
		list := make([]any, len(n.Content))
		for i, c := range n.Content {
			list[i] = d.node(c, fmt.Sprintf("%s[%d]", path, i), depth+1, probs)
		}
		return list
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				*probs = append(*probs, d.problem(path, err.Error()))
			}
			return b
		case "!!int":
			i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
			if err != nil {
				*probs = append(*probs, d.problem(path, "integer out of range: "+n.Value))
			}
			return i
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				*probs = append(*probs, d.problem(path, "not a finite number: "+n.Value))
			}
			return f
		case "!!str":
			d.strs[path] = strPos{n.Line, n.Column, n.Style}
			return n.Value
		default:
			*probs = append(*probs, d.problem(path, "unsupported YAML type "+n.ShortTag()))
			return nil
		}
	}
	*probs = append(*probs, d.problem(path, "unsupported YAML node"))
	return nil
}

// join adds key to path: a.b, or a["odd key"] for keys that are not plain.
func join(path, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			plain = false
		}
	}
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	}
	return path + "." + key
}

// sortProblems orders problems by position in the file, then path.
func sortProblems(ps Errors) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.Line != b.Line {
			if a.Line == 0 || b.Line == 0 {
				return a.Line != 0
			}
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return a.Path < b.Path
	})
}

// exprPos is the file line and column of the expression at path's
// line eline, column ecol (both from 1): on the value's own line for a
// one-line value; in a block scalar (| or >, the way long expressions
// are written) on the content line the position falls in, folded lines
// joined by a space as YAML joins them. ok is false when it cannot tell.
func (d *doc) exprPos(path string, eline, ecol int) (line, col int, ok bool) {
	sp, found := d.strs[path]
	if !found || eline < 1 || ecol < 1 {
		return 0, 0, false
	}
	switch {
	case sp.style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
	case eline == 1:
		if sp.style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			return sp.line, sp.col + ecol, true // past the quote
		}
		return sp.line, sp.col + ecol - 1, true
	default:
		return 0, 0, false
	}
	// The content starts on the line after the indicator; its
	// indentation is the first non-blank content line's.
	indent := -1
	exprLine, offset := 1, 0
	first, prevMore := true, false
	for i := sp.line; i < len(d.lines); i++ { // d.lines[sp.line] is the file's line sp.line+1
		text := d.lines[i]
		if strings.TrimSpace(text) == "" {
			if indent >= 0 && sp.style&yaml.FoldedStyle != 0 {
				exprLine, offset = exprLine+1, 0 // a blank line folds to a line break
			}
			continue
		}
		n := len(text) - len(strings.TrimLeft(text, " "))
		if indent < 0 {
			indent = n
		}
		if n < indent {
			break // past the block
		}
		// Folding keeps the line break around a more-indented line.
		if more := n > indent; sp.style&yaml.FoldedStyle != 0 && !first && (more || prevMore) {
			exprLine, offset = exprLine+1, 0
			prevMore = more
		} else {
			prevMore = more
		}
		first = false
		content := text[indent:]
		if exprLine == eline && ecol <= offset+len(content)+1 {
			return i + 1, indent + ecol - offset, true
		}
		if sp.style&yaml.LiteralStyle != 0 {
			exprLine++
			continue
		}
		offset += len(content) + 1 // folded: joined by a space
	}
	return 0, 0, false
}

// NameOf is the name a spec file gives, read leniently ("" when it has
// none it can read): for saying what a file is called even when it does
// not compile.
func NameOf(src []byte) string {
	var v struct {
		Name string `yaml:"name"`
	}
	if len(src) > schemas.MaxTaskSpecBytes || yaml.Unmarshal(src, &v) != nil {
		return ""
	}
	return v.Name
}
