// Package hanoi is the Towers of Hanoi microagent of the MAKER paper.
//
// Pegs are 0, 1 and 2; disks are 1 (smallest) to n; each peg lists its
// disks bottom to top. The run starts with every disk on peg 0 and ends with
// every disk on peg 2 after 2^n − 1 moves. Each step asks the model for one
// move by the classic strategy: if the previous move did not move disk 1,
// move disk 1 one peg in a fixed direction; otherwise make the only legal
// move that does not involve disk 1. The direction 0→1→2→0 ends on peg 2 for
// even n; odd n needs 0→2→1→0. The package gets both right.
//
// The model's answer is `move = [disk, from, to]` and
// `next_state = [[...], [...], [...]]`; the vote is the pair, in canonical
// JSON, and the next step starts from the winner's own next_state.
package hanoi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/makerfleet/makerfleet/task"
)

// Name is the task's registry name.
const Name = "hanoi"

// MaxDisks is the largest disk count accepted: 2^30 − 1 steps.
const MaxDisks = 30

// Move is [disk, from, to].
type Move [3]int

// Pegs holds the three pegs, each listed bottom to top.
type Pegs [3][]int

// UnmarshalJSON requires exactly three numbers: decoding into a Go array
// would silently drop extra elements or zero-fill missing ones.
func (m *Move) UnmarshalJSON(b []byte) error {
	var xs []int
	if err := json.Unmarshal(b, &xs); err != nil {
		return err
	}
	if xs == nil { // null leaves m alone, as encoding/json does
		return nil
	}
	if len(xs) != 3 {
		return fmt.Errorf("move has %d numbers, want 3", len(xs))
	}
	copy(m[:], xs)
	return nil
}

// UnmarshalJSON requires exactly three pegs, for the same reason as Move's.
func (p *Pegs) UnmarshalJSON(b []byte) error {
	var xs [][]int
	if err := json.Unmarshal(b, &xs); err != nil {
		return err
	}
	if xs == nil {
		return nil
	}
	if len(xs) != 3 {
		return fmt.Errorf("state has %d pegs, want 3", len(xs))
	}
	copy(p[:], xs)
	return nil
}

// Params are the task parameters.
type Params struct {
	Disks int `json:"disks"`
}

// State is the state a step starts from: the pegs and the move that led
// there (nil before the first move).
type State struct {
	Pegs Pegs  `json:"pegs"`
	Prev *Move `json:"prev,omitempty"`
}

// Answer is a parsed model answer; its canonical JSON is the vote key.
type Answer struct {
	Move      Move `json:"move"`
	NextState Pegs `json:"next_state"`
}

// Task is the hanoi task. Its zero value is ready to use.
type Task struct{}

var _ task.Task = Task{}

// Name implements task.Task.
func (Task) Name() string { return Name }

// Bind implements task.Task. Params must be {"disks": n} with 1 ≤ n ≤ 30.
func (Task) Bind(raw json.RawMessage) (task.Instance, error) {
	var p Params
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: hanoi params must be {\"disks\": n}: %v", task.ErrInvalidParams, err)
	}
	// Decode stops after one value; without this, `{"disks":3} junk` or two
	// objects in a row would be accepted as valid params.
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: hanoi params must be one JSON object, found trailing data", task.ErrInvalidParams)
	}
	return New(p.Disks)
}

// New returns the instance for n disks.
func New(disks int) (*Instance, error) {
	if disks < 1 || disks > MaxDisks {
		return nil, fmt.Errorf("%w: disks must be between 1 and %d, got %d", task.ErrInvalidParams, MaxDisks, disks)
	}
	return &Instance{n: disks, system: systemPrompt(disks)}, nil
}

// Instance is hanoi bound to a disk count.
type Instance struct {
	n      int
	system string // the system prompt, the same for every step
}

var (
	_ task.Instance   = (*Instance)(nil)
	_ task.Verifier   = (*Instance)(nil)
	_ task.Progresser = (*Instance)(nil)
)

// Disks returns n.
func (in *Instance) Disks() int { return in.n }

// Params implements task.Instance.
func (in *Instance) Params() json.RawMessage {
	b, _ := json.Marshal(Params{Disks: in.n})
	return b
}

// TotalSteps implements task.Instance: 2^n − 1.
func (in *Instance) TotalSteps() int64 { return int64(1)<<in.n - 1 }

// Initial implements task.Instance.
func (in *Instance) Initial() task.State {
	start := make([]int, in.n)
	for i := range start {
		start[i] = in.n - i
	}
	return encodeState(State{Pegs: Pegs{start, {}, {}}})
}

// Done implements task.Instance.
func (in *Instance) Done(s task.State) bool {
	st, err := in.DecodeState(s)
	if err != nil {
		return false
	}
	return len(st.Pegs[0]) == 0 && len(st.Pegs[1]) == 0 && isTower(st.Pegs[2], in.n)
}

// Next implements task.Instance: the state is the winner's next_state and
// the move that led there, exactly as the model gave them.
func (in *Instance) Next(_ task.State, v task.Vote) (task.State, error) {
	a, err := DecodeAnswer(v.Key)
	if err != nil {
		return nil, err
	}
	if err := checkPegs(a.NextState, in.n); err != nil {
		return nil, fmt.Errorf("%w: %v", task.ErrMalformed, err)
	}
	if a.Move[0] < 1 || a.Move[0] > in.n || a.Move[1] < 0 || a.Move[1] > 2 || a.Move[2] < 0 || a.Move[2] > 2 {
		return nil, fmt.Errorf("%w: move %v outside disks 1..%d and pegs 0..2", task.ErrMalformed, a.Move, in.n)
	}
	// Another spelling of the same answer would split its votes.
	if a.Key() != v.Key {
		return nil, fmt.Errorf("%w: vote key is not canonical (want %s)", task.ErrMalformed, a.Key())
	}
	m := a.Move
	return encodeState(State{Pegs: a.NextState, Prev: &m}), nil
}

// Verify implements task.Verifier: the decided move must be the strategy's
// move from s, and next_state the result of making it.
func (in *Instance) Verify(s task.State, v task.Vote) error {
	st, err := in.DecodeState(s)
	if err != nil {
		return err
	}
	a, err := DecodeAnswer(v.Key)
	if err != nil {
		return err
	}
	want, err := StrategyMove(st.Pegs, st.Prev, in.n)
	if err != nil {
		return fmt.Errorf("%w: no strategy move from this state: %v", task.ErrWrongStep, err)
	}
	if a.Move != want {
		return fmt.Errorf("%w: move %v, strategy says %v", task.ErrWrongStep, a.Move, want)
	}
	next, err := Apply(st.Pegs, want)
	if err != nil {
		return fmt.Errorf("%w: %v", task.ErrWrongStep, err)
	}
	if !equalPegs(next, a.NextState) {
		return fmt.Errorf("%w: next_state %s, move gives %s", task.ErrWrongStep, FormatPegs(a.NextState), FormatPegs(next))
	}
	return nil
}

// Progress implements task.Progresser: the share of the optimal solution
// done at s, read off the pegs. A state off the optimal path (after a wrong
// step) reports 0.
func (in *Instance) Progress(s task.State) float64 {
	st, err := in.DecodeState(s)
	if err != nil {
		return 0
	}
	done, ok := StepOf(st.Pegs, in.n)
	if !ok {
		return 0
	}
	return float64(done) / float64(in.TotalSteps())
}

// StepOf returns how many moves of the optimal solution (all disks from
// peg 0 to peg 2) lead to p; ok is false when p is not on that path. The
// largest disk decides the half: still on the source peg, the smaller
// tower is on its way to the spare peg; on the target peg, 2^(n-1) moves
// are done and the smaller tower is on its way from the spare peg.
func StepOf(p Pegs, n int) (int64, bool) {
	where := make([]int, n+1)
	for peg, disks := range p {
		for i, d := range disks {
			if d < 1 || d > n || (i > 0 && disks[i-1] < d) {
				return 0, false
			}
			where[d] = peg
		}
	}
	var done int64
	src, spare, dst := 0, 1, 2
	for d := n; d >= 1; d-- {
		switch where[d] {
		case src:
			spare, dst = dst, spare
		case dst:
			done += int64(1) << (d - 1)
			src, spare = spare, src
		default:
			return 0, false
		}
	}
	return done, true
}

// DecodeState decodes and checks a state for this instance.
func (in *Instance) DecodeState(s task.State) (State, error) {
	st, ok := fastState(string(s))
	if !ok {
		st = State{}
		if err := json.Unmarshal(s, &st); err != nil {
			return State{}, fmt.Errorf("%w: %v", task.ErrInvalidState, err)
		}
	}
	if err := checkPegs(st.Pegs, in.n); err != nil {
		return State{}, fmt.Errorf("%w: %v", task.ErrInvalidState, err)
	}
	return st, nil
}

// DecodeAnswer decodes a vote key.
func DecodeAnswer(key string) (Answer, error) {
	if a, ok := fastAnswer(key); ok {
		return a, nil
	}
	var a Answer
	if err := json.Unmarshal([]byte(key), &a); err != nil {
		return Answer{}, fmt.Errorf("%w: vote key: %v", task.ErrMalformed, err)
	}
	return a, nil
}

// fastState reads the canonical encoding EncodeState writes,
// {"pegs":[[..],[..],[..]]} with an optional ,"prev":[d,f,t], without the
// JSON decoder (states are read on every sample); ok is false for any other
// spelling, which json.Unmarshal then reads.
func fastState(s string) (st State, ok bool) {
	rest, ok := strings.CutPrefix(s, `{"pegs":`)
	if !ok {
		return State{}, false
	}
	end := strings.Index(rest, "]]") // inner lists hold only numbers
	if end < 0 {
		return State{}, false
	}
	lists, ok := fastLists(rest[:end+2])
	if !ok {
		return State{}, false
	}
	if st.Pegs, ok = fastPegs(lists); !ok {
		return State{}, false
	}
	rest = rest[end+2:]
	if rest == "}" {
		return st, true
	}
	prev, ok := strings.CutPrefix(rest, `,"prev":`)
	if !ok || !strings.HasSuffix(prev, "}") {
		return State{}, false
	}
	mv, ok := fastIntList(prev[:len(prev)-1])
	if !ok || len(mv) != 3 {
		return State{}, false
	}
	st.Prev = &Move{mv[0], mv[1], mv[2]}
	return st, true
}

// fastAnswer reads the canonical vote key Key writes, the same way.
func fastAnswer(key string) (a Answer, ok bool) {
	rest, ok := strings.CutPrefix(key, `{"move":`)
	if !ok {
		return Answer{}, false
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return Answer{}, false
	}
	mv, ok := fastIntList(rest[:end+1])
	if !ok || len(mv) != 3 {
		return Answer{}, false
	}
	a.Move = Move{mv[0], mv[1], mv[2]}
	rest, ok = strings.CutPrefix(rest[end+1:], `,"next_state":`)
	if !ok || !strings.HasSuffix(rest, "}") {
		return Answer{}, false
	}
	lists, ok := fastLists(rest[:len(rest)-1])
	if !ok {
		return Answer{}, false
	}
	if a.NextState, ok = fastPegs(lists); !ok {
		return Answer{}, false
	}
	return a, true
}

// normPegs turns nil pegs into empty ones so they encode as [].
func normPegs(p Pegs) Pegs {
	for i := range p {
		if p[i] == nil {
			p[i] = []int{}
		}
	}
	return p
}

// Direction returns the peg offset disk 1 moves by: +1 (0→1→2→0) for even
// n, +2 (0→2→1→0) for odd n, so that the tower ends on peg 2.
func Direction(n int) int {
	if n%2 == 0 {
		return 1
	}
	return 2
}

// StrategyMove returns the move the strategy makes from pegs after prev.
func StrategyMove(p Pegs, prev *Move, n int) (Move, error) {
	one := -1
	for i, peg := range p {
		if len(peg) > 0 && peg[len(peg)-1] == 1 {
			one = i
		}
	}
	if one < 0 {
		return Move{}, fmt.Errorf("disk 1 is not on top of any peg")
	}
	if prev == nil || prev[0] != 1 {
		return Move{1, one, (one + Direction(n)) % 3}, nil
	}
	a, b := (one+1)%3, (one+2)%3
	ta, tb := top(p[a]), top(p[b])
	switch {
	case ta == 0 && tb == 0:
		return Move{}, fmt.Errorf("no legal move without disk 1")
	case ta == 0:
		return Move{tb, b, a}, nil
	case tb == 0 || ta < tb:
		return Move{ta, a, b}, nil
	default:
		return Move{tb, b, a}, nil
	}
}

// Apply returns the pegs after m, or an error if m is illegal.
func Apply(p Pegs, m Move) (Pegs, error) {
	d, from, to := m[0], m[1], m[2]
	if from < 0 || from > 2 || to < 0 || to > 2 || from == to {
		return Pegs{}, fmt.Errorf("illegal move %v: bad pegs", m)
	}
	// top reports an empty peg as disk 0, so check emptiness first: a move
	// of "disk 0" from an empty peg would otherwise slice out of range.
	if len(p[from]) == 0 {
		return Pegs{}, fmt.Errorf("illegal move %v: peg %d is empty", m, from)
	}
	if top(p[from]) != d {
		return Pegs{}, fmt.Errorf("illegal move %v: disk %d is not on top of peg %d", m, d, from)
	}
	if t := top(p[to]); t != 0 && t < d {
		return Pegs{}, fmt.Errorf("illegal move %v: disk %d on smaller disk %d", m, d, t)
	}
	var out Pegs
	for i := range p {
		out[i] = append([]int{}, p[i]...)
	}
	out[from] = out[from][:len(out[from])-1]
	out[to] = append(out[to], d)
	return out, nil
}

func top(peg []int) int {
	if len(peg) == 0 {
		return 0
	}
	return peg[len(peg)-1]
}

func isTower(peg []int, n int) bool {
	if len(peg) != n {
		return false
	}
	for i, d := range peg {
		if d != n-i {
			return false
		}
	}
	return true
}

// checkPegs verifies the parser's rule: three pegs holding each disk 1..n
// exactly once. Order on a peg is not checked: that would be a legality
// check, which MAKER leaves to voting.
func checkPegs(p Pegs, n int) error {
	seen := make([]bool, n+1)
	count := 0
	for _, peg := range p {
		for _, d := range peg {
			if d < 1 || d > n {
				return fmt.Errorf("disk %d outside 1..%d", d, n)
			}
			if seen[d] {
				return fmt.Errorf("disk %d appears twice", d)
			}
			seen[d] = true
			count++
		}
	}
	if count != n {
		return fmt.Errorf("state holds %d disks, want %d", count, n)
	}
	return nil
}

func equalPegs(a, b Pegs) bool {
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}
