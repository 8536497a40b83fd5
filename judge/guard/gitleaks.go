package guard

import (
	"math"
	"regexp"
	"strings"
	"sync"
)

// gitleaks' rules, applied by the guard itself: the rule file gitleaks
// publishes (gitleaks/gitleaks.toml, its version and licence beside it) is
// turned into gitleaks_rules.go by `go generate`, and this file does what
// gitleaks' detector does with it — the keyword prefilter, the rule's
// regex, its secret group, its entropy threshold and the allowlists — so
// the gitleaks library and its tree are not linked.

//go:generate go run gitleaks_gen.go -version v8.30.1

// leakRule is one rule of the file, as generated.
type leakRule struct {
	id, regex, path string
	secretGroup     int
	entropy         float64
	keywords        []string
	allowlists      []leakAllow
}

// leakAllow is one allowlist of the file, as generated. paths says it
// also allows by file path, which the guard never does (paths are the
// requester's choice).
type leakAllow struct {
	and         bool
	regexTarget string
	regexes     []string
	stopWords   []string
	paths       bool
}

type compiledLeakRule struct {
	id       string
	re, path *regexp.Regexp
	group    int
	entropy  float64
	keywords []string
	allows   []compiledAllow
}

type compiledAllow struct {
	and    bool
	target string
	res    []*regexp.Regexp
	stop   []string
}

type leakRuleSet struct {
	rules  []compiledLeakRule
	global []compiledAllow
}

// leakRules compiles the rules once per process (tens of milliseconds).
var leakRules = sync.OnceValue(func() leakRuleSet {
	set := leakRuleSet{global: compileAllows(gitleaksAllowlist)}
	for _, r := range gitleaksRules {
		c := compiledLeakRule{id: r.id, group: r.secretGroup, entropy: r.entropy, allows: compileAllows(r.allowlists)}
		if r.regex != "" {
			c.re = regexp.MustCompile(r.regex) // checked by TestLeakRulesCompile
		}
		if r.path != "" {
			c.path = regexp.MustCompile(r.path)
		}
		for _, k := range r.keywords {
			c.keywords = append(c.keywords, strings.ToLower(k))
		}
		set.rules = append(set.rules, c)
	}
	return set
})

// compileAllows drops what allows by file path: naming a file go.sum must
// not skip the scan. An allowlist by pattern or stop word stays; one that
// needs a path and something else (AND) is dropped whole (stricter).
func compileAllows(in []leakAllow) []compiledAllow {
	var out []compiledAllow
	for _, a := range in {
		if a.paths && (a.and || len(a.regexes)+len(a.stopWords) == 0) {
			continue
		}
		c := compiledAllow{and: a.and, target: a.regexTarget}
		for _, re := range a.regexes {
			c.res = append(c.res, regexp.MustCompile(re))
		}
		for _, w := range a.stopWords {
			c.stop = append(c.stop, strings.ToLower(w))
		}
		out = append(out, c)
	}
	return out
}

// leakFinding is one rule's finding: the secret, the whole match and the
// line it is on.
type leakFinding struct {
	rule                string
	secret, match, line string
}

// allowed says whether the allowlist lets f through, as gitleaks decides
// it: any check (OR) or every check given (AND).
func (a compiledAllow) allowed(f leakFinding) bool {
	target := f.secret
	switch a.target {
	case "match":
		target = f.match
	case "line":
		target = f.line
	}
	regex := false
	for _, re := range a.res {
		if target != "" && re.MatchString(target) {
			regex = true
			break
		}
	}
	stop := false
	lower := strings.ToLower(f.secret)
	for _, w := range a.stop {
		if strings.Contains(lower, w) {
			stop = true
			break
		}
	}
	if a.and {
		return (len(a.res) == 0 || regex) && (len(a.stop) == 0 || stop)
	}
	return regex || stop
}

// leakFindings runs the rules on n (normalised text) from the file name
// (normalised; "" for text that is no file). A rule on the path alone that
// matches name is a finding with no secret.
func leakFindings(n, name string) []leakFinding {
	set := leakRules()
	lower := strings.ToLower(n)
	var out []leakFinding
	for _, r := range set.rules {
		if r.path != nil {
			if name == "" || !r.path.MatchString(name) {
				continue
			}
			if r.re == nil {
				out = append(out, leakFinding{rule: r.id})
				continue
			}
		}
		if r.re == nil || !hasKeyword(lower, r.keywords) {
			continue
		}
		for _, m := range r.re.FindAllStringIndex(n, -1) {
			match := strings.Trim(n[m[0]:m[1]], "\n")
			f := leakFinding{rule: r.id, secret: match, match: match, line: lineAt(n, m[0], m[0]+len(match))}
			if g := r.re.FindStringSubmatch(match); len(g) >= 2 {
				if r.group > 0 {
					if r.group >= len(g) {
						continue
					}
					f.secret = g[r.group]
				} else {
					for _, s := range g[1:] {
						if s != "" {
							f.secret = s
							break
						}
					}
				}
			}
			if r.entropy != 0 && leakEntropy(f.secret) <= r.entropy {
				continue
			}
			if anyAllows(set.global, f) || anyAllows(r.allows, f) {
				continue
			}
			out = append(out, f)
		}
	}
	return out
}

// leakEntropy is the Shannon entropy gitleaks' thresholds are set for:
// characters counted by rune, frequencies over the length in bytes (the
// same as shannon for ASCII).
func leakEntropy(s string) float64 {
	if s == "" {
		return 0
	}
	counts := map[rune]int{}
	for _, r := range s {
		counts[r]++
	}
	var h float64
	for _, c := range counts {
		p := float64(c) / float64(len(s))
		h -= p * math.Log2(p)
	}
	return h
}

func hasKeyword(lower string, keywords []string) bool {
	if len(keywords) == 0 {
		return true
	}
	for _, k := range keywords {
		if strings.Contains(lower, k) {
			return true
		}
	}
	return false
}

func anyAllows(as []compiledAllow, f leakFinding) bool {
	for _, a := range as {
		if a.allowed(f) {
			return true
		}
	}
	return false
}

// lineAt returns the whole lines of n that [start, end) touches.
func lineAt(n string, start, end int) string {
	s := strings.LastIndexByte(n[:start], '\n') + 1
	e := strings.IndexByte(n[end:], '\n')
	if e < 0 {
		return n[s:]
	}
	return n[s : end+e]
}
