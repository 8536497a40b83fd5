package judge

import (
	"path"
	"regexp"
	"strings"

	"github.com/makerfleet/makerfleet/schemas"
)

// Type sources.
const (
	SourceRequest  = "request"
	SourceDetected = "detected"
)

// classifierRules: per type, word stems that count as evidence when they
// start a word of the problem, and file extensions that count twice.
var classifierRules = []struct {
	typ   string
	words []string
	exts  []string
}{
	{schemas.ProblemLeanProof, []string{
		"lean", "lake build", "mathlib", "theorem", "lemma", "sorry", "simp", "tactic", "native_decide",
		"omega", "decide", "proof", "prove ", "goal", "rfl", "induction",
	}, []string{".lean"}},
	{schemas.ProblemCodeBug, []string{
		"bug", "panic", "nil pointer", "null pointer", "segfault", "segmentation", "stack trace", "traceback",
		"exception", "crash", "race", "deadlock", "regression", "test fail", "tests fail", "failing test",
		"compile error", "does not compile", "off-by-one", "wrong result", "returns", "function", "leak",
	}, []string{".go", ".py", ".rs", ".ts", ".js", ".java", ".c", ".cc", ".cpp", ".rb", ".kt", ".swift"}},
	{schemas.ProblemArchitecture, []string{
		"architecture", "design", "redesign", "refactor", "scalab", "scale", "migrat", "trade-off", "tradeoff",
		"boundar", "coupling", "modular", "monolith", "microservice", "api shape", "data model", "schema design",
		"layering", "abstraction",
	}, nil},
	{schemas.ProblemMathNovel, []string{
		"conjecture", "prove that", "integral", "asymptotic", "closed form", "closed-form", "combinatori",
		"prime", "inequality", "bound on", "upper bound", "lower bound", "polynomial", "equation", "matrix",
		"eigen", "probability", "expected value", "series", "convergen", "graph theory",
	}, []string{".tex"}},
	{schemas.ProblemInfraDebug, []string{
		"kubernetes", "k8s", "kubectl", "pod", "docker", "container", "helm", "terraform", "nats", "redis",
		"dns", "tls", "certificate", "network", "firewall", "load balancer", "ingress", "deploy", "systemd",
		"oom", "disk full", "latency", "timeout", "timed out", "connection refused", "connection reset",
		"ci ", "pipeline", "cluster", "node", "replica", "throughput",
	}, []string{".yaml", ".yml", ".tf", ".toml", ".service", ".conf"}},
}

var classifierRE = func() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(classifierRules))
	for i, r := range classifierRules {
		alts := make([]string, len(r.words))
		for j, w := range r.words {
			alts[j] = regexp.QuoteMeta(w)
		}
		out[i] = regexp.MustCompile(`(?:^|[^a-z0-9_])(?:` + strings.Join(alts, "|") + `)`)
	}
	return out
}()

// Classify returns the problem type of a request and where it came from:
// the request's own type when it names one, else the detected one.
//
// Detection scores each type: one point per keyword occurrence at the start
// of a word in the problem statement (lower-cased; the "break glass:"
// trigger removed), two points per context file with one of the type's
// extensions (".lean" for lean_proof, source files for code_bug, ".tex" for
// math_novel, YAML/Terraform/unit files for infra_debug). The highest score
// wins; a tie goes to the type listed first in schemas.ProblemTypes order
// (lean_proof, code_bug, architecture, math_novel, infra_debug); no evidence
// at all gives code_bug.
func Classify(req *schemas.BreakGlassRequest) (typ, source string) {
	if req.ProblemType != "" {
		return req.ProblemType, SourceRequest
	}
	return DetectRequest(req), SourceDetected
}

// DetectRequest is Classify's detection on req, whatever type it
// declares: the cost gate compares the two (Settings.GateType).
func DetectRequest(req *schemas.BreakGlassRequest) string {
	paths := make([]string, len(req.Files))
	for i, f := range req.Files {
		paths[i] = f.Path
	}
	return Detect(req.Problem, paths)
}

// Detect is Classify's detection on a problem statement and file paths.
func Detect(problem string, paths []string) string {
	text := strings.ToLower(stripTrigger(problem))
	best, bestScore := schemas.ProblemCodeBug, 0
	for i, r := range classifierRules {
		score := len(classifierRE[i].FindAllStringIndex(text, -1))
		for _, p := range paths {
			ext := strings.ToLower(path.Ext(p))
			for _, e := range r.exts {
				if ext == e {
					score += 2
				}
			}
		}
		if score > bestScore {
			best, bestScore = r.typ, score
		}
	}
	return best
}

// HasTrigger reports whether problem starts with the "break glass:"
// trigger (case-insensitive, after leading space) followed by a statement.
func HasTrigger(problem string) bool {
	p := strings.TrimSpace(problem)
	if len(p) < len(schemas.BreakGlassTrigger) || !strings.EqualFold(p[:len(schemas.BreakGlassTrigger)], schemas.BreakGlassTrigger) {
		return false
	}
	return strings.TrimSpace(p[len(schemas.BreakGlassTrigger):]) != ""
}

// stripTrigger removes the trigger prefix if present.
func stripTrigger(problem string) string {
	p := strings.TrimSpace(problem)
	if HasTrigger(p) {
		return strings.TrimSpace(p[len(schemas.BreakGlassTrigger):])
	}
	return p
}

// MissingAttempts returns the required prior attempt kinds the request does
// not record with a non-empty note.
func MissingAttempts(req *schemas.BreakGlassRequest) []string {
	have := make(map[string]bool)
	for _, a := range req.PriorAttempts {
		if strings.TrimSpace(a.Note) != "" {
			have[a.Kind] = true
		}
	}
	var missing []string
	for _, k := range schemas.RequiredAttempts() {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	return missing
}
