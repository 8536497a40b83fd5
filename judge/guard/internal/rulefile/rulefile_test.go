package rulefile

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"unicode/utf8"
)

// TestVendoredFile reads the rule file the guard is generated from: every
// rule has an id, and every regex compiles in Go's RE2.
func TestVendoredFile(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "..", "gitleaks", "gitleaks.toml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Rules) < 200 || f.Allowlist == nil || len(f.Allowlist.Regexes) == 0 || len(f.Allowlist.StopWords) == 0 {
		t.Fatalf("%d rules, global allowlist %+v", len(f.Rules), f.Allowlist)
	}
	ids := map[string]bool{}
	for _, r := range f.Rules {
		if r.ID == "" || ids[r.ID] {
			t.Errorf("rule id %q empty or repeated", r.ID)
		}
		ids[r.ID] = true
		for _, re := range append([]string{r.Regex, r.Path}, allowRegexes(r.Allowlists)...) {
			if _, err := regexp.Compile(re); err != nil {
				t.Errorf("rule %s: %v", r.ID, err)
			}
		}
	}
	if !ids["generic-api-key"] || !ids["aws-access-token"] {
		t.Error("well-known rules missing")
	}
}

func allowRegexes(as []Allowlist) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Regexes...)
		out = append(out, a.Paths...)
	}
	return out
}

func TestParse(t *testing.T) {
	t.Parallel()
	f, err := Parse(`# a comment
title = "t"
[allowlist]
description = "global"
regexes = ['''^a$''', "b\\d\"\u00e9",]
stopwords = [
    "x", # why
]

[[rules]]
id = "r1"
regex = '''(?i)key=([a-z]+)'''
secretGroup = 1
entropy = 3.5
keywords = ["key"]
[[rules.allowlists]]
condition = "AND"
regexTarget = "line"
regexes = ['''test''']
paths = ['''\.md$''']

[[rules]]
id = 'r2'
path = '''\.p12$'''
`)
	if err != nil {
		t.Fatal(err)
	}
	if f.Title != "t" || f.Allowlist.Regexes[1] != "b\\d\"é" || f.Allowlist.StopWords[0] != "x" {
		t.Fatalf("%+v", f.Allowlist)
	}
	r := f.Rules[0]
	if r.ID != "r1" || r.SecretGroup != 1 || r.Entropy != 3.5 || r.Keywords[0] != "key" || r.Regex != `(?i)key=([a-z]+)` {
		t.Fatalf("%+v", r)
	}
	a := r.Allowlists[0]
	if a.Condition != "AND" || a.RegexTarget != "line" || a.Paths[0] != `\.md$` {
		t.Fatalf("%+v", a)
	}
	if f.Rules[1].ID != "r2" || f.Rules[1].Path != `\.p12$` {
		t.Fatalf("%+v", f.Rules[1])
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"unknown = 1",
		"[[rules]]\nid = 1",
		"[[rules]]\nnewfeature = true",
		"[[rules.allowlists]]\nregexes = []",
		"[what]",
		"[[rules]\n",
		"[[rules]]\nregex = '''a\nb'''",
		"[[rules]]\nregex = \"\"\"a\"\"\"",
		"[[rules]]\nid = \"open",
		"[[rules]]\nkeywords = [\"a\"",
		"[[rules]]\nkeywords = [[\"a\"]]",
		"[[rules]]\nkeywords = [\"a\" \"b\"]",
		"[[rules]]\nid = \"a\" junk",
		"[[rules]]\nid = \"\\q\"",
		"[[rules]]\nsecretGroup = 1.5",
		"[[rules]]\n[[rules.allowlists]]\ncondition = \"XOR\"",
		"[allowlist]\n[allowlist]",
		"= 1",
	} {
		if _, err := Parse(src); !errors.Is(err, ErrSyntax) {
			t.Errorf("%q: %v, want ErrSyntax", src, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("[[rules]]\nid = \"a\"\nkeywords = [\"k\", '''x''',]\n")
	f.Add("[allowlist]\nregexes = ['''^a$''']\nstopwords = [\n\"x\",\n]\n")
	f.Add("title = \"\\u00e9\"\n[[rules]]\nentropy = 3.5\n[[rules.allowlists]]\ncondition = \"AND\"\n")
	f.Fuzz(func(t *testing.T, src string) {
		f, err := Parse(src)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error %v does not wrap ErrSyntax", err)
			}
			return
		}
		// What the reader accepts holds only valid UTF-8 strings.
		for _, r := range f.Rules {
			if !utf8.ValidString(r.ID) || !utf8.ValidString(r.Regex) {
				t.Fatalf("invalid UTF-8 read: %q %q", r.ID, r.Regex)
			}
		}
	})
}
