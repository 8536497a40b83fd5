package spec

import (
	"regexp"
	"slices"
	"testing"
)

// scanPatterns are answer patterns of every shape the scanner jumps with
// (and some it leaves to the regexp).
var scanPatterns = []string{
	`\bmove\s*=\s*(?P<move>\[(?:[^\[\]]|\[[^\[\]]*\])*\])|\bnext_state\s*=\s*(?P<next_state>\[(?:[^\[\]]|\[[^\[\]]*\])*\])`,
	`(?i)answer:\s*(?P<a>\w+)`, `(?m)^label: (?P<label>[a-z]+)$`, `\Astart (?P<x>\d+)`, `\Bb(?P<y>c+)`,
	`(?P<n>[0-9]+)\.(?P<f>[0-9]*)`, `é+(?P<e>ß|ſ)`, `(?i)é(?P<e>k)`, `(?P<any>.+)`, `(?P<opt>a?)`, `x*(?P<w>y)`,
	`(?:ab|cd){2,3}(?P<z>e)`, `(?P<d>\d{3})-(?P<k>\d{4})`, `[^a](?P<q>b)`, `\x{FFFD}(?P<r>x)`, `(?s)a.(?P<s>b)`,
}

// TestScannerJumps: the patterns the examples use take the fast path.
func TestScannerJumps(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		jumps   bool
	}{
		{scanPatterns[0], true}, {`(?i)answer:\s*(?P<a>\w+)`, true}, {`(?m)^label: (?P<label>[a-z]+)$`, true},
		{`(?P<any>.+)`, false}, {`(?P<opt>a?)`, false}, {`[^a](?P<q>b)`, false}, {`\x{FFFD}(?P<r>x)`, false},
		{`(?P<d>\d{3})-(?P<k>\d{4})`, true},
	} {
		if got := newScanner(regexp.MustCompile(tc.pattern)).first != nil; got != tc.jumps {
			t.Errorf("%s: jumps %v, want %v", tc.pattern, got, tc.jumps)
		}
	}
}

// FuzzScanner: the scanner finds exactly the matches
// regexp.FindAllStringSubmatchIndex finds, for any pattern and text.
func FuzzScanner(f *testing.F) {
	texts := []string{
		"Following the strategy.\n\nmove = [1, 0, 2]\nnext_state = [[3, 2], [], [1]]\nremove = [9]",
		"ANSWER: yes\nanswer:no", "label: spam\nlabel: ham\nxlabel: x", "start 12 start 3", "abcc bcc",
		"3.14 and 2.", "éeßéſ", "Ék", "\xffx\xef\xbf\xbdx", "a\nb axb", "", "m", "\xc3",
	}
	for i, p := range scanPatterns {
		f.Add(p, texts[i%len(texts)])
	}
	f.Fuzz(func(t *testing.T, pattern, text string) {
		re, err := regexp.Compile(pattern)
		if err != nil || len(pattern) > 200 {
			return
		}
		want := re.FindAllStringSubmatchIndex(text, -1)
		got := newScanner(re).all(text)
		if !slices.EqualFunc(got, want, slices.Equal[[]int]) {
			t.Fatalf("pattern %q on %q:\n scanner %v\n regexp  %v", pattern, text, got, want)
		}
	})
}
