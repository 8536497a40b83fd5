package hanoi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/makerfleet/makerfleet/task"
)

// Prompt implements task.Instance. The system message carries the rules,
// the strategy and the answer format; the user message carries only the
// previous move and the current state, in the same plain-list format the
// answer uses.
func (in *Instance) Prompt(s task.State) ([]task.Message, error) {
	st, err := in.DecodeState(s)
	if err != nil {
		return nil, err
	}
	prev := "none"
	if st.Prev != nil {
		prev = "move = " + FormatMove(*st.Prev)
	}
	user := "Previous move: " + prev + "\n" +
		"Current state: " + FormatPegs(st.Pegs) + "\n" +
		"Give the next move and the state after it."
	return []task.Message{
		{Role: "system", Content: in.system},
		{Role: "user", Content: user},
	}, nil
}

// PromptVersion is a short hash of the prompt template, the same for every
// disk count: the prompts of the first two steps of 3 disks (one without a
// previous move, one with). Calibrations (internal/calibrate) are kept
// under it, so one measured at 10 disks serves 20, and a changed prompt
// starts afresh.
func (in *Instance) PromptVersion() string { return promptVersion() }

var promptVersion = sync.OnceValue(func() string {
	in, _ := New(3)
	h := sha256.New()
	for step := range int64(2) {
		msgs, err := in.Prompt(encodeState(OptimalState(3, step)))
		if err != nil {
			panic("hanoi: the prompt of a fixed state: " + err.Error())
		}
		for _, m := range msgs {
			fmt.Fprintf(h, "%s\x00%s\x00", m.Role, m.Content)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
})

// DirectionCycle is the text the prompt uses for a direction; the
// simulated model reads it back.
func DirectionCycle(n int) string {
	if Direction(n) == 1 {
		return "0 -> 1 -> 2 -> 0"
	}
	return "0 -> 2 -> 1 -> 0"
}

// systemPrompt depends only on n: New renders it once.
func systemPrompt(n int) string {
	return fmt.Sprintf(`You are solving Towers of Hanoi with %d disks, one move at a time.
Disks are numbered 1 (smallest) to %d (largest). Pegs are numbered 0, 1 and 2.
A state is a list of the three pegs in order; each peg lists its disks from bottom to top.
Rules: move one disk at a time, only the top disk of a peg, never onto a smaller disk.

Strategy, followed exactly:
- If the previous move did not move disk 1 (or there is no previous move), move disk 1 one peg along the cycle %s.
- Otherwise, make the only legal move that does not move disk 1.

Reason briefly, then end your reply with exactly these two lines:
move = [disk, from, to]
next_state = [[...], [...], [...]]
For example, from [[3, 2, 1], [], []] moving disk 1 from peg 0 to peg 2 ends with:
move = [1, 0, 2]
next_state = [[3, 2], [], [1]]`, n, n, DirectionCycle(n))
}

// FormatMove renders a move as the prompt and the answer write it.
func FormatMove(m Move) string {
	return "[" + strconv.Itoa(m[0]) + ", " + strconv.Itoa(m[1]) + ", " + strconv.Itoa(m[2]) + "]"
}

// FormatPegs renders pegs as the prompt and the answer write them:
// [[3, 2], [], [1]].
func FormatPegs(p Pegs) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, peg := range p {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('[')
		for j, d := range peg {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Itoa(d))
		}
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}
