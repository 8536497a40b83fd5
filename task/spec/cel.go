package spec

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"

	"github.com/makerfleet/makerfleet/task"
)

// Limits of an expression.
const (
	// CostLimit bounds the work of one evaluation, in CEL's cost units
	// (about one per operation, plus one per element a list or string
	// function touches). An expression whose cheapest possible run costs
	// more is refused when the spec is compiled; one that goes over it
	// while running fails with a clear error.
	CostLimit = 10_000_000
	// EvalTimeout bounds one evaluation's wall time, however cheap CEL
	// thinks it is.
	EvalTimeout = time.Second
	// maxExprBytes bounds an expression's text.
	maxExprBytes = 16 << 10
)

// vars are the expression variables; which ones an expression may use
// depends on where it stands in the spec.
const (
	varParams = "params"
	varState  = "state"
	varAnswer = "answer"
)

// newEnv is the environment every expression of a spec compiles in: the
// standard functions plus the string, list, set, math and encoder
// extensions, and the three variables, dynamically typed (their shape is
// the task's own). Nothing in it does I/O.
func newEnv(lets ...string) (*cel.Env, error) {
	vars := []cel.EnvOption{
		cel.Variable(varParams, cel.DynType),
		cel.Variable(varState, cel.DynType),
		cel.Variable(varAnswer, cel.DynType),
	}
	for _, l := range lets {
		vars = append(vars, cel.Variable(l, cel.DynType))
	}
	return cel.NewEnv(append(vars,
		ext.Strings(),
		ext.Lists(ext.ListsVersion(3)),
		ext.Sets(),
		ext.Math(),
		ext.Encoders(),
		ext.Bindings(),
		ext.TwoVarComprehensions(),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		authorLib(),
	)...)
}

// errTimeout: an evaluation ran past EvalTimeout. Unlike every other
// failure it may not happen again, so results that end in it are not
// cached.
var errTimeout = fmt.Errorf("took longer than %s", EvalTimeout)

// expr is a compiled expression, ready to evaluate.
type expr struct {
	src  string
	ast  *cel.Ast
	prog cel.Program
	// want is the kind of value it must give: "" for any, or bool, int,
	// number, list, object.
	want string
}

// compileExpr compiles src for the given variables and result kind,
// reporting problems at path.
//
// lets are the spec's let names: references to them are checked against
// allowed like the three variables'.
func compileExpr(env *cel.Env, d *doc, path, src string, allowed []string, want string, lets ...string) (*expr, Errors) {
	if len(src) > maxExprBytes {
		return nil, Errors{d.problem(path, fmt.Sprintf("expression longer than %d bytes", maxExprBytes))}
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		var probs Errors
		for _, e := range iss.Errors() {
			p := d.problem(path, "CEL: "+e.Message)
			// The file's line and column where the error is, inside the
			// value (a block scalar's too); else the expression's own.
			if loc := e.Location; loc != nil && loc.Line() > 0 {
				if line, col, ok := d.exprPos(path, loc.Line(), loc.Column()+1); ok {
					p.Line, p.Column = line, col
				} else {
					p.Msg = fmt.Sprintf("CEL (expression line %d, column %d): %s", loc.Line(), loc.Column()+1, e.Message)
				}
			}
			probs = append(probs, p)
		}
		return nil, probs
	}
	var probs Errors
	for _, ref := range references(ast) {
		if ref != varParams && ref != varState && ref != varAnswer && !slices.Contains(lets, ref) {
			continue // a comprehension's or cel.bind's own variable
		}
		ok := false
		for _, a := range allowed {
			ok = ok || ref == a
		}
		if !ok {
			what := "is not available here"
			if slices.Contains(lets, ref) {
				what = "(a let) reads what is not available here, or comes later"
			}
			probs = append(probs, d.problem(path, fmt.Sprintf("%q %s (this expression sees %v)", ref, what, allowed)))
		}
	}
	if t := ast.OutputType(); want != "" && !fits(t, want) {
		probs = append(probs, d.problem(path, fmt.Sprintf("gives %s, want %s", t, want)))
	}
	if est, err := env.EstimateCost(ast, sizeEstimator{}); err == nil && est.Min > CostLimit {
		probs = append(probs, d.problem(path, fmt.Sprintf("cost limit exceeded: even its cheapest run costs %d, over the limit %d", est.Min, CostLimit)))
	}
	if len(probs) > 0 {
		return nil, probs
	}
	prog, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100),
		cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, Errors{d.problem(path, "CEL: "+err.Error())}
	}
	return &expr{src: src, ast: ast, prog: prog, want: want}, nil
}

// references lists the variables an expression reads.
func references(ast *cel.Ast) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ast.NativeRep().ReferenceMap() {
		if id.Value == nil && id.Name != "" && !seen[id.Name] {
			seen[id.Name] = true
			out = append(out, id.Name)
		}
	}
	sort.Strings(out)
	return out
}

// fits reports whether the checked output type t can be a want value.
func fits(t *cel.Type, want string) bool {
	if t == cel.DynType || t.Kind() == types.DynKind || t.Kind() == types.AnyKind {
		return true
	}
	switch want {
	case "bool":
		return t == cel.BoolType
	case "int":
		return t == cel.IntType || t == cel.UintType
	case "number":
		return t == cel.IntType || t == cel.UintType || t == cel.DoubleType
	case "list":
		return t.Kind() == types.ListKind
	case "object":
		return t.Kind() == types.MapKind
	}
	return true
}

// sizeEstimator bounds the variables for the cost estimate: a task's
// params, state and answer are at most a message's size.
type sizeEstimator struct{}

func (sizeEstimator) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }

func (sizeEstimator) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

// eval runs e on the variables and returns its value as plain Go values
// (map[string]any, []any, int64, float64, string, bool, nil). Errors wrap
// task.ErrEval and say which expression failed.
func (e *expr) eval(name string, vars map[string]any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), EvalTimeout)
	defer cancel()
	val, _, err := e.prog.ContextEval(ctx, vars)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: %s (%s): %w", task.ErrEval, name, e.src, errTimeout)
		}
		return nil, fmt.Errorf("%w: %s (%s): %s", task.ErrEval, name, e.src, err)
	}
	v, err := native(val, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (%s): %v", task.ErrEval, name, e.src, err)
	}
	if !kindOf(v, e.want) {
		return nil, fmt.Errorf("%w: %s (%s) gave %s, want %s", task.ErrEval, name, e.src, describeValue(v), e.want)
	}
	return v, nil
}

func kindOf(v any, want string) bool {
	switch want {
	case "bool":
		_, ok := v.(bool)
		return ok
	case "int":
		_, ok := v.(int64)
		return ok
	case "number":
		switch v.(type) {
		case int64, float64:
			return true
		}
		return false
	case "list":
		_, ok := v.([]any)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	}
	return true
}

func describeValue(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a bool"
	case int64:
		return "an int"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// native turns a CEL value into plain Go values that encode as JSON.
func native(v ref.Val, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("value nested more than %d deep", maxDepth)
	}
	switch x := v.(type) {
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		if uint64(x) > math.MaxInt64 {
			return nil, fmt.Errorf("uint %d does not fit an int", uint64(x))
		}
		return int64(x), nil
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", f)
		}
		return f, nil
	case types.String:
		return string(x), nil
	case types.Null:
		return nil, nil
	case *types.Err:
		return nil, x
	}
	if l, ok := v.(traits.Lister); ok {
		n := int(l.Size().(types.Int))
		out := make([]any, n)
		for i := range n {
			e, err := native(l.Get(types.Int(i)), depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	}
	if m, ok := v.(traits.Mapper); ok {
		out := map[string]any{}
		it := m.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("an object key must be a string, got %s", k.Type().TypeName())
			}
			e, err := native(m.Get(k), depth+1)
			if err != nil {
				return nil, err
			}
			out[string(ks)] = e
		}
		return out, nil
	}
	return nil, fmt.Errorf("a %s value has no JSON form", v.Type().TypeName())
}

// answerFields lists the fields of the answer an expression reads by
// name (answer.f, answer["f"], has(answer.f)); whole is set when it uses
// the answer otherwise (passed on, indexed by a computed key), so its
// fields cannot be told.
func answerFields(a *cel.Ast) (fields []string, whole bool) {
	seen := map[string]bool{}
	root := celast.NavigateAST(a.NativeRep())
	for _, e := range celast.MatchDescendants(root, func(e celast.NavigableExpr) bool {
		return e.Kind() == celast.IdentKind && e.AsIdent() == varAnswer
	}) {
		parent, ok := e.Parent()
		field := ""
		switch {
		case ok && parent.Kind() == celast.SelectKind:
			field = parent.AsSelect().FieldName()
		case ok && parent.Kind() == celast.CallKind && parent.AsCall().FunctionName() == operators.Index:
			if args := parent.AsCall().Args(); len(args) == 2 && args[1].Kind() == celast.LiteralKind {
				if s, isStr := args[1].AsLiteral().Value().(string); isStr {
					field = s
				}
			}
		}
		if field == "" {
			whole = true
			continue
		}
		if !seen[field] {
			seen[field] = true
			fields = append(fields, field)
		}
	}
	sort.Strings(fields)
	return fields, whole
}

// let is a compiled named expression (schemas.TaskLet).
type let struct {
	name string
	e    *expr
}

// withLets adds the lets to vars, each evaluated when an expression first
// reads it and kept for the rest of that evaluation; a failure is the
// reading expression's, naming the let.
func withLets(vars map[string]any, lets []let) {
	for _, l := range lets {
		var (
			once sync.Once
			val  ref.Val
		)
		vars[l.name] = func() ref.Val {
			once.Do(func() {
				v, err := l.e.eval("let "+l.name, vars)
				if err != nil {
					val = types.WrapErr(err)
					return
				}
				val = types.DefaultTypeAdapter.NativeToValue(v)
			})
			return val
		}
	}
}
