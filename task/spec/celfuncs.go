package spec

import (
	"fmt"
	"math"
	"regexp"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/parser"
	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	"golang.org/x/text/unicode/norm"

	"github.com/makerfleet/makerfleet/internal/lru"
	"github.com/makerfleet/makerfleet/internal/plainjson"
)

// authorLib is what spec authors reach for beyond CEL's extensions:
//
//	<string>.lower(), <string>.upper()    Unicode case mapping, full ("Đorđević".upper() is "ĐORĐEVIĆ",
//	                                      "Straße".upper() "STRASSE"); a Caser is made per call: they keep state
//	<string>.normalize(<form>)            Unicode normalisation: "NFC", "NFD", "NFKC" or "NFKD"
//	<string>.replaceRegex(<re>, <repl>)   every match of the RE2 pattern replaced; $1, ${name} expand
//	<list>.sum()                          the sum of numbers: an int for ints (overflow is an error), else a double
//	<list>.unique()                       the items without repeats, first kept, in linear time
//	                                      (CEL's distinct() compares every pair)
//	<list>.fold(x, acc, init, step)       acc starts at init; for each item x, acc becomes step
//
// Each function's cost is charged by the length of what it reads, so the
// cost limit bounds them as it bounds the rest.
func authorLib() cel.EnvOption {
	str, list := cel.StringType, cel.ListType(cel.DynType)
	return cel.Lib(authorLibrary{str: str, list: list})
}

type authorLibrary struct{ str, list *cel.Type }

func (authorLibrary) LibraryName() string { return "makerfleet.spec.author" }

func (l authorLibrary) CompileOptions() []cel.EnvOption {
	linear := func(id string) cost.OverloadModel {
		return cost.MemberOverload(id, cost.EvalCost(cost.Length(cost.Target())))
	}
	return []cel.EnvOption{
		cel.Function("lower", cel.MemberOverload("string_lower_unicode", []*cel.Type{l.str}, l.str,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				return types.String(cases.Lower(language.Und).String(string(v.(types.String))))
			}))),
		cel.Function("upper", cel.MemberOverload("string_upper_unicode", []*cel.Type{l.str}, l.str,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				return types.String(cases.Upper(language.Und).String(string(v.(types.String))))
			}))),
		cel.Function("normalize", cel.MemberOverload("string_normalize", []*cel.Type{l.str, l.str}, l.str,
			cel.BinaryBinding(normalize))),
		cel.Function("replaceRegex", cel.MemberOverload("string_replace_regex", []*cel.Type{l.str, l.str, l.str}, l.str,
			cel.FunctionBinding(replaceRegex))),
		cel.Function("sum", cel.MemberOverload("list_sum", []*cel.Type{l.list}, cel.DynType,
			cel.UnaryBinding(sum))),
		cel.Function("unique", cel.MemberOverload("list_unique", []*cel.Type{l.list}, l.list,
			cel.UnaryBinding(unique))),
		cel.Macros(cel.ReceiverMacro("fold", 4, makeFold)),
		cel.CostModel(linear("string_lower_unicode"), linear("string_upper_unicode"), linear("string_normalize"),
			linear("string_replace_regex"), linear("list_sum"), linear("list_unique")),
	}
}

func (authorLibrary) ProgramOptions() []cel.ProgramOption { return nil }

func normalize(s, form ref.Val) ref.Val {
	var f norm.Form
	switch form.(types.String) {
	case "NFC":
		f = norm.NFC
	case "NFD":
		f = norm.NFD
	case "NFKC":
		f = norm.NFKC
	case "NFKD":
		f = norm.NFKD
	default:
		return types.NewErr("normalize: form %q is not NFC, NFD, NFKC or NFKD", string(form.(types.String)))
	}
	return types.String(f.String(string(s.(types.String))))
}

// patterns keeps compiled replaceRegex patterns: an expression uses a few.
var patterns = lru.New[string, *regexp.Regexp](64)

func replaceRegex(args ...ref.Val) ref.Val {
	s, pat, repl := string(args[0].(types.String)), string(args[1].(types.String)), string(args[2].(types.String))
	re, ok := patterns.Get(pat)
	if !ok {
		var err error
		if re, err = regexp.Compile(pat); err != nil {
			return types.NewErr("replaceRegex: %v", err)
		}
		patterns.Put(pat, re)
	}
	return types.String(re.ReplaceAllString(s, repl))
}

func sum(v ref.Val) ref.Val {
	l := v.(traits.Lister)
	var (
		ints  int64
		float float64
		isF   bool
	)
	it := l.Iterator()
	for i := 0; it.HasNext() == types.True; i++ {
		switch x := it.Next().(type) {
		case types.Int:
			if !isF {
				if (x > 0 && ints > math.MaxInt64-int64(x)) || (x < 0 && ints < math.MinInt64-int64(x)) {
					return types.NewErr("sum: int overflow")
				}
				ints += int64(x)
			} else {
				float += float64(x)
			}
		case types.Double:
			if !isF {
				isF, float = true, float64(ints)
			}
			float += float64(x)
		case types.Uint:
			if !isF {
				isF, float = true, float64(ints)
			}
			float += float64(x)
		default:
			return types.NewErr("sum: item %d is a %s, not a number", i, x.Type().TypeName())
		}
	}
	if isF {
		return types.Double(float)
	}
	return types.Int(ints)
}

// unique keeps each item's first occurrence, items told apart by their
// canonical JSON (so 1 and 1.0, equal in CEL, are one item).
func unique(v ref.Val) ref.Val {
	l := v.(traits.Lister)
	seen := map[string]bool{}
	var out []ref.Val
	it := l.Iterator()
	for it.HasNext() == types.True {
		x := it.Next()
		nv, err := native(x, 0)
		if err != nil {
			return types.NewErr("unique: %v", err)
		}
		if f, ok := nv.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			nv = int64(f)
		}
		k, err := plainjson.Marshal(nv)
		if err != nil {
			return types.NewErr("unique: %v", err)
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			out = append(out, x)
		}
	}
	return types.NewRefValList(types.DefaultTypeAdapter, out)
}

// makeFold expands <list>.fold(x, acc, init, step) into a comprehension
// over the list whose accumulator, named acc, starts at init.
func makeFold(eh parser.ExprHelper, target celast.Expr, args []celast.Expr) (celast.Expr, *common.Error) {
	x, ok := identOf(args[0])
	if !ok {
		return nil, eh.NewError(args[0].ID(), "fold: the first argument is the item's name")
	}
	acc, ok := identOf(args[1])
	if !ok {
		return nil, eh.NewError(args[1].ID(), "fold: the second argument is the accumulator's name")
	}
	if x == acc {
		return nil, eh.NewError(args[1].ID(), fmt.Sprintf("fold: the item and the accumulator are both %q", x))
	}
	return eh.NewComprehension(target, x, acc, args[2], eh.NewLiteral(types.True), args[3], eh.NewIdent(acc)), nil
}

func identOf(e celast.Expr) (string, bool) {
	if e.Kind() != celast.IdentKind {
		return "", false
	}
	return e.AsIdent(), true
}
