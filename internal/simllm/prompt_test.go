package simllm

import (
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/task/hanoi"
)

// The sim reads task/hanoi's own prompts back and solves every step of
// whole runs, for odd and even disk counts.
func TestReadPromptSolvesWholeRuns(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8} {
		in := mustInstance(t, n)
		states := walk(t, in, 1<<n)
		if len(states) != 1<<n-1 {
			t.Fatalf("n=%d: %d states, want %d", n, len(states), 1<<n-1)
		}
		for i, s := range states {
			p, ok := readPrompt(texts(t, in, s))
			if !ok {
				t.Fatalf("n=%d step %d: prompt not recognised", n, i)
			}
			if p.disks != n || p.dir != hanoi.Direction(n) {
				t.Fatalf("n=%d step %d: read disks %d dir %d", n, i, p.disks, p.dir)
			}
			st, ok := newStep(p)
			if !ok {
				t.Fatalf("n=%d step %d: no move", n, i)
			}
			key := hanoi.Answer{Move: st.right, NextState: st.next}.Key()
			if err := in.Verify(s, voteOf(key)); err != nil {
				t.Fatalf("n=%d step %d: sim's right answer fails Verify: %v", n, i, err)
			}
		}
	}
}

// A prompt stating the other cycle gets answers that follow the prompt.
func TestReadPromptFollowsStatedCycle(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 4} {
		in := mustInstance(t, n)
		txt := texts(t, in, in.Initial())
		right, wrong := hanoi.DirectionCycle(n), hanoi.DirectionCycle(n+1)
		txt[0] = strings.ReplaceAll(txt[0], right, wrong)
		p, ok := readPrompt(txt)
		if !ok {
			t.Fatalf("n=%d: not recognised", n)
		}
		st, ok := newStep(p)
		if !ok {
			t.Fatal("no move")
		}
		want := hanoi.Move{1, 0, hanoi.Direction(n + 1)}
		if st.right != want {
			t.Errorf("n=%d with cycle %q: move %v, want %v", n, wrong, st.right, want)
		}
	}
}

func TestReadPromptRejects(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 3)
	good := texts(t, in, in.Initial())
	sys, user := good[0], good[1]
	tests := []struct {
		name  string
		texts []string
	}{
		{"empty", nil},
		{"chit-chat", []string{"Hello! What is the capital of France?"}},
		{"no system", []string{user}},
		{"no user", []string{sys}},
		{"zero disks", []string{strings.Replace(sys, "with 3 disks", "with 0 disks", 1), user}},
		{"too many disks", []string{strings.Replace(sys, "with 3 disks", "with 31 disks", 1), user}},
		{"no cycle", []string{strings.ReplaceAll(sys, "0 -> 2 -> 1 -> 0", "counterclockwise"), user}},
		{"bad cycle", []string{strings.ReplaceAll(sys, "0 -> 2 -> 1 -> 0", "0 -> 1 -> 1 -> 0"), user}},
		{"state missing disk", []string{sys, strings.Replace(user, "[[3, 2, 1], [], []]", "[[3, 2], [], []]", 1)}},
		{"state disk twice", []string{sys, strings.Replace(user, "[[3, 2, 1], [], []]", "[[3, 2, 1], [1], []]", 1)}},
		{"state two pegs", []string{sys, strings.Replace(user, "[[3, 2, 1], [], []]", "[[3, 2, 1], []]", 1)}},
		{"state four pegs", []string{sys, strings.Replace(user, "[[3, 2, 1], [], []]", "[[3, 2, 1], [], [], []]", 1)}},
		{"state words", []string{sys, strings.Replace(user, "[[3, 2, 1], [], []]", "[[three], [], []]", 1)}},
		{"no previous move", []string{sys, strings.Replace(user, "Previous move: none", "", 1)}},
		{"previous move two numbers", []string{sys, strings.Replace(user, "Previous move: none", "Previous move: move = [1, 2]", 1)}},
		{"previous move bad peg", []string{sys, strings.Replace(user, "Previous move: none", "Previous move: move = [1, 0, 3]", 1)}},
		{"disk 1 buried", []string{sys, strings.Replace(user, "[[3, 2, 1], [], []]", "[[3, 1, 2], [], []]", 1)}},
	}
	for _, tt := range tests {
		p, ok := readPrompt(tt.texts)
		if ok {
			if _, solvable := newStep(p); solvable {
				t.Errorf("%s: recognised and solvable: %+v", tt.name, p)
			}
		}
	}
}

func FuzzReadPrompt(f *testing.F) {
	for _, n := range []int{1, 2, 3, 5} {
		in := mustInstance(f, n)
		for _, s := range walk(f, in, 4) {
			txt := texts(f, in, s)
			f.Add(txt[0], txt[1])
		}
	}
	f.Add("Towers of Hanoi with 3 disks 0 -> 1 -> 2 -> 0", "Previous move: move = [1, 0, 1]\nCurrent state: [[3, 2], [1], []]")
	f.Add("Towers of Hanoi with 999 disks 0->2->1->0", "Current state: [[[]]]")
	f.Add("", "Previous move: move = [, , ]\nCurrent state: [[ , ], [], []]")
	f.Fuzz(func(t *testing.T, system, user string) {
		p, ok := readPrompt([]string{system, user})
		if !ok {
			return
		}
		in, err := hanoi.New(p.disks)
		if err != nil {
			t.Fatalf("recognised %d disks: %v", p.disks, err)
		}
		st, ok := newStep(p)
		if !ok {
			return
		}
		// A solvable prompt's answers must behave: right and wrong ones
		// parse, malformed ones do not.
		for k := range numWrong {
			m, next := st.wrongKind(testRNG(uint64(k)), k)
			if _, err := hanoi.ParseAnswer(answerText(st, m, next), in.Disks()); err != nil {
				t.Fatalf("wrong kind %d does not parse: %v", k, err)
			}
		}
		if _, err := hanoi.ParseAnswer(answerText(st, st.right, st.next), in.Disks()); err != nil {
			t.Fatalf("right answer does not parse: %v", err)
		}
		for k := range numMalformed {
			var b strings.Builder
			st.writeMalformedKind(&b, testRNG(uint64(k)), k)
			if a, err := hanoi.ParseAnswer(b.String(), in.Disks()); err == nil {
				t.Fatalf("malformed kind %d parses as %s:\n%s", k, a.Key(), b.String())
			}
		}
	})
}
