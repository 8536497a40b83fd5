package simllm

import (
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/task/hanoi"
)

// outcome is what a choice turned out to be; Stats counts them.
type outcome uint8

const (
	outCorrect outcome = iota
	outWrong
	outMalformed
	outOverlong
	outUnrecognized
	outBreakGlass // an answer to a break-glass prompt (breakglass.go)
)

// choice is one generated completion.
type choice struct {
	content string
	finish  string // "stop" or "length"
	tokens  int
	outcome outcome
}

// step is a recognised prompt with its solution, shared by a request's
// choices.
type step struct {
	p     hanoiPrompt
	right hanoi.Move
	next  hanoi.Pegs
}

// newStep solves p; a prompt without a strategy move (e.g. disk 1 buried)
// is treated as unrecognised.
func newStep(p hanoiPrompt) (*step, bool) {
	m, next, err := p.solve()
	if err != nil {
		return nil, false
	}
	return &step{p: p, right: m, next: next}, true
}

// generate draws one choice. st is nil for an unrecognised prompt; pEff is
// the chance a valid answer is right; limit is the token limit (0: none).
func generate(rng *rand.Rand, st *step, pEff float64, overlongRate, malformedRate float64, spread, limit int) choice {
	var b strings.Builder
	b.Grow(512)
	out := outUnrecognized
	if st == nil {
		writeUnrecognized(&b, rng)
	} else {
		u := rng.Float64()
		switch {
		case u < overlongRate:
			return overlong(rng, st, limit)
		case u < overlongRate+malformedRate:
			out = outMalformed
			st.writeMalformed(&b, rng)
		case rng.Float64() < pEff:
			out = outCorrect
			st.writeAnswer(&b, rng, st.right, st.next)
		default:
			out = outWrong
			m, next := st.wrong(rng, spread)
			st.writeAnswer(&b, rng, m, next)
		}
	}
	text := b.String()
	tokens := tokenCount(text)
	if limit > 0 && tokens > limit {
		return choice{content: text[:limit*4], finish: "length", tokens: limit, outcome: outOverlong}
	}
	return choice{content: text, finish: "stop", tokens: tokens, outcome: out}
}

// tokenCount estimates tokens as OpenAI's rule of thumb: 4 bytes a token.
func tokenCount(s string) int { return (len(s) + 3) / 4 }

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

var (
	openers = []string{
		"", "", "Okay. ", "Let me apply the strategy. ", "Following the strategy exactly. ",
		"Step by step: ", "Let me look at the current state. ",
	}
	closers = []string{
		"", "", " No disk ends up on a smaller one.", " Every other disk stays where it is.",
		" Here is the resulting state.", " That is the only move the strategy allows.",
	}
	// actions are sentences around the disk, from and to numbers.
	actions = [][4]string{
		{"So disk ", " goes from peg ", " to peg ", "."},
		{"The move is disk ", " from peg ", " to peg ", "."},
		{"Moving disk ", " from peg ", " to peg ", " is legal here."},
		{"I take disk ", " off peg ", " and put it on peg ", "."},
	}
)

// writeReasoning writes a short, varied explanation of m (20-80 tokens). It
// never contains "=", so it cannot confuse the strict parser.
func (st *step) writeReasoning(b *strings.Builder, rng *rand.Rand, m hanoi.Move) {
	b.WriteString(pick(rng, openers))
	cyc := st.p.cycle()
	switch prev := st.p.prev; {
	case prev == nil:
		b.WriteString(pick(rng, []string{
			"There is no previous move, so disk 1 moves one peg along the cycle " + cyc + ". ",
			"This is the first move: disk 1 steps along " + cyc + ". ",
		}))
	case prev[0] != 1:
		d := strconv.Itoa(prev[0])
		b.WriteString(pick(rng, []string{
			"The previous move moved disk " + d + ", not disk 1, so disk 1 moves one peg along " + cyc + ". ",
			"Disk " + d + " moved last, so it is disk 1's turn to follow the cycle " + cyc + ". ",
		}))
	default:
		b.WriteString(pick(rng, []string{
			"The previous move moved disk 1, so I make the only legal move that does not involve disk 1. ",
			"Disk 1 just moved. Comparing the tops of the other two pegs, the smaller disk goes onto the other peg. ",
			"Since disk 1 moved last, this step moves a different disk, onto an empty peg or a larger disk. ",
		}))
	}
	a := pick(rng, actions)
	for i, v := range m {
		b.WriteString(a[i])
		b.WriteString(strconv.Itoa(v))
	}
	b.WriteString(a[3])
	b.WriteString(pick(rng, closers))
}

// writeAnswer writes reasoning and the two answer lines.
func (st *step) writeAnswer(b *strings.Builder, rng *rand.Rand, m hanoi.Move, next hanoi.Pegs) {
	st.writeReasoning(b, rng, m)
	b.WriteString("\n\nmove = ")
	b.WriteString(hanoi.FormatMove(m))
	b.WriteString("\nnext_state = ")
	b.WriteString(hanoi.FormatPegs(next))
}

// Kinds of wrong answer. Each is well formed and differs from the right one.
const (
	wrongOtherMove = iota // another legal move with its true next state
	wrongPeg              // right move, disk on the third peg
	wrongBottom           // right move, disk slid under the target peg's disks
	wrongUnchanged        // right move, state unchanged
	wrongReversed         // from and to swapped, right next state
	numWrong
)

// wrong draws a wrong but well-formed answer: of any kind (spread 0), or
// one of the first spread wrong candidates in a fixed order (spread 1:
// always the same one).
func (st *step) wrong(rng *rand.Rand, spread int) (hanoi.Move, hanoi.Pegs) {
	if spread <= 0 {
		return st.wrongKind(rng, rng.IntN(numWrong))
	}
	cands := st.wrongCandidates()
	c := cands[rng.IntN(min(spread, len(cands)))]
	return c.m, c.next
}

// wrongCandidate is one wrong answer.
type wrongCandidate struct {
	m    hanoi.Move
	next hanoi.Pegs
}

// wrongCandidates lists the step's wrong answers in a fixed order: the
// reversed move first (the likeliest slip), then the right move with a
// wrong state, then the other legal moves; each once, never the right one.
func (st *step) wrongCandidates() []wrongCandidate {
	var out []wrongCandidate
	seen := map[string]bool{hanoi.Answer{Move: st.right, NextState: st.next}.Key(): true}
	add := func(m hanoi.Move, next hanoi.Pegs) {
		k := hanoi.Answer{Move: m, NextState: next}.Key()
		if !seen[k] {
			seen[k] = true
			out = append(out, wrongCandidate{m, next})
		}
	}
	for _, kind := range []int{wrongReversed, wrongPeg, wrongBottom, wrongUnchanged} {
		m, next := st.wrongKind(nil, kind)
		add(m, next)
	}
	for _, alt := range st.otherLegalMoves() {
		next, _ := hanoi.Apply(st.p.pegs, alt)
		add(alt, next)
	}
	return out
}

// wrongKind returns a wrong answer of the given kind, or the unchanged
// state when the kind does not apply.
func (st *step) wrongKind(rng *rand.Rand, kind int) (hanoi.Move, hanoi.Pegs) {
	m := st.right
	d, from, to := m[0], m[1], m[2]
	switch kind {
	case wrongOtherMove:
		if alts := st.otherLegalMoves(); len(alts) > 0 {
			alt := pick(rng, alts)
			next, _ := hanoi.Apply(st.p.pegs, alt)
			return alt, next
		}
	case wrongPeg:
		return m, moveDisk(st.p.pegs, from, 3-from-to, false)
	case wrongBottom:
		if len(st.p.pegs[to]) > 0 {
			return m, moveDisk(st.p.pegs, from, to, true)
		}
		return m, moveDisk(st.p.pegs, from, 3-from-to, false)
	case wrongReversed:
		return hanoi.Move{d, to, from}, st.next
	}
	return m, st.p.pegs
}

// otherLegalMoves lists the legal moves other than the right one.
func (st *step) otherLegalMoves() []hanoi.Move {
	var out []hanoi.Move
	for from := range 3 {
		peg := st.p.pegs[from]
		if len(peg) == 0 {
			continue
		}
		for to := range 3 {
			m := hanoi.Move{peg[len(peg)-1], from, to}
			if to == from || m == st.right {
				continue
			}
			if _, err := hanoi.Apply(st.p.pegs, m); err == nil {
				out = append(out, m)
			}
		}
	}
	return out
}

// moveDisk moves the top disk of from to the top (or bottom) of to, legal or
// not; the result still holds every disk once.
func moveDisk(p hanoi.Pegs, from, to int, bottom bool) hanoi.Pegs {
	var out hanoi.Pegs
	for i := range p {
		out[i] = append(make([]int, 0, len(p[i])+1), p[i]...)
	}
	d := out[from][len(out[from])-1]
	out[from] = out[from][:len(out[from])-1]
	if bottom {
		out[to] = append([]int{d}, out[to]...)
	} else {
		out[to] = append(out[to], d)
	}
	return out
}

// Kinds of malformed answer. Each fails hanoi.ParseAnswer.
const (
	malNoState     = iota // no next_state line
	malTwoNumbers         // move = [disk, to]
	malTwoPegs            // next_state with two pegs
	malDuplicate          // the moved disk on both pegs
	malMissingDisk        // the moved disk vanished
	malParens             // move = (d, f, t)
	malProse              // no answer lines at all
	numMalformed
)

func (st *step) writeMalformed(b *strings.Builder, rng *rand.Rand) {
	st.writeMalformedKind(b, rng, rng.IntN(numMalformed))
}

func (st *step) writeMalformedKind(b *strings.Builder, rng *rand.Rand, kind int) {
	m, next := st.right, st.next
	d, from, to := m[0], m[1], m[2]
	st.writeReasoning(b, rng, m)
	moveLine := "\n\nmove = " + hanoi.FormatMove(m)
	switch kind {
	case malNoState:
		b.WriteString(moveLine)
	case malTwoNumbers:
		b.WriteString("\n\nmove = [" + strconv.Itoa(d) + ", " + strconv.Itoa(to) + "]")
		b.WriteString("\nnext_state = " + hanoi.FormatPegs(next))
	case malTwoPegs:
		two := hanoi.FormatPegs(next)
		two = two[:strings.LastIndex(two, ", [")] + "]"
		b.WriteString(moveLine + "\nnext_state = " + two)
	case malDuplicate:
		dup := moveDisk(st.p.pegs, from, to, false)
		dup[from] = append(dup[from], d)
		b.WriteString(moveLine + "\nnext_state = " + hanoi.FormatPegs(dup))
	case malMissingDisk:
		gone := moveDisk(st.p.pegs, from, to, false)
		gone[to] = gone[to][:len(gone[to])-1]
		b.WriteString(moveLine + "\nnext_state = " + hanoi.FormatPegs(gone))
	case malParens:
		b.WriteString("\n\nmove = (" + strconv.Itoa(d) + ", " + strconv.Itoa(from) + ", " + strconv.Itoa(to) + ")")
		b.WriteString("\nnext_state = " + hanoi.FormatPegs(next))
	default:
		b.WriteString(" After that the pegs are " + hanoi.FormatPegs(next) + ".")
	}
}

var rambles = []string{
	"Wait, let me double-check the rules before answering. ",
	"Each peg lists its disks from bottom to top, so the last number is the top disk. ",
	"Hmm, I should recount the disks on every peg to be sure nothing is lost. ",
	"Let me reconsider whether the previous move involved disk 1 or not. ",
	"Actually, it might be safer to trace the cycle once more from the start. ",
	"A larger disk may never rest on a smaller one, so let me verify each peg again. ",
	"On second thought, the other direction around the cycle deserves a look too. ",
}

// overlong writes a reply that rambles to the token limit. Half the time it
// states a tentative answer first (usually wrong: long replies are), so a
// client that parses without checking finish_reason collects bad votes.
func overlong(rng *rand.Rand, st *step, limit int) choice {
	if limit <= 0 {
		limit = OverlongTokens
	}
	size := limit * 4
	var b strings.Builder
	b.Grow(size + 128)
	st.writeReasoning(&b, rng, st.right)
	if rng.IntN(2) == 0 {
		m, next := st.right, st.next
		if rng.IntN(2) == 0 {
			m, next = st.wrong(rng, 0)
		}
		b.WriteString("\nTentatively:\nmove = " + hanoi.FormatMove(m) + "\nnext_state = " + hanoi.FormatPegs(next) + "\n")
	}
	for b.Len() < size {
		b.WriteString(pick(rng, rambles))
	}
	return choice{content: b.String()[:size], finish: "length", tokens: limit, outcome: outOverlong}
}

var unrecognizedReplies = []string{
	"I'm a simulated model for Towers of Hanoi step prompts, and I couldn't find one in your message. Please send the rules with the disk count and cycle, the previous move and the current state.",
	"Thanks for your message! I can only help with a single Towers of Hanoi step: tell me the number of disks, the cycle for disk 1, the previous move and the current state.",
	"Sorry, I don't recognise this request. I answer one Towers of Hanoi move at a time when given the disk count, the cycle, the previous move and the current state.",
}

func writeUnrecognized(b *strings.Builder, rng *rand.Rand) {
	b.WriteString(pick(rng, unrecognizedReplies))
}

// unanswerable is the reply to a prompt the model cannot answer: neither
// a Hanoi step nor a task-spec step it can work out. It says why, so that
// the red flags it becomes name the cause (a voter without --sim-hints, a
// model that cannot read the spec, a reference that fails).
func unanswerable(rng *rand.Rand, hinted bool, why string, limit int) choice {
	var b strings.Builder
	writeUnrecognized(&b, rng)
	switch {
	case hinted:
		b.WriteString(" [simulated model] I cannot answer this task-spec step: " + why)
	default:
		b.WriteString(" [simulated model] This is not a Towers of Hanoi step, and the request names no task step: " +
			"a task spec's steps are answered when the voter sends hints (maker voter --sim-hints).")
	}
	text := b.String()
	tokens := tokenCount(text)
	if limit > 0 && tokens > limit {
		return choice{content: text[:limit*4], finish: "length", tokens: limit, outcome: outOverlong}
	}
	return choice{content: text, finish: "stop", tokens: tokens, outcome: outUnrecognized}
}
