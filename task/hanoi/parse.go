package hanoi

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/task"
)

// The labels the parser looks for, as the regexp \bLABEL\s*=\s* would
// match them; a hand-written scan, because this runs on every sample.
const (
	moveLabel  = "move"
	stateLabel = "next_state"
)

// Parse implements task.Instance with the paper's strict parser: it takes the
// last `move =` and the last `next_state =` of the reply; the move must be
// exactly three integers (a disk 1..n and two pegs 0..2), the state exactly
// three lists of integers holding each disk 1..n exactly once. Anything else
// is a red flag; nothing is repaired.
func (in *Instance) Parse(_ task.State, reply string) (task.Vote, error) {
	a, err := ParseAnswer(reply, in.n)
	if err != nil {
		return task.Vote{}, err
	}
	return task.Vote{Key: a.Key()}, nil
}

// ParseAnswer is the strict parser behind Parse.
func ParseAnswer(reply string, n int) (Answer, error) {
	moveText, err := lastList(reply, moveLabel, "move")
	if err != nil {
		return Answer{}, err
	}
	stateText, err := lastList(reply, stateLabel, "next_state")
	if err != nil {
		return Answer{}, err
	}
	var a Answer
	mv, ok := fastIntList(moveText)
	if !ok {
		mv, err = intList(moveText)
	}
	if err != nil {
		return Answer{}, fmt.Errorf("%w: move: %v", task.ErrMalformed, err)
	}
	if len(mv) != 3 {
		return Answer{}, fmt.Errorf("%w: move has %d numbers, want 3", task.ErrMalformed, len(mv))
	}
	if mv[0] < 1 || mv[0] > n {
		return Answer{}, fmt.Errorf("%w: move disk %d outside 1..%d", task.ErrMalformed, mv[0], n)
	}
	if mv[1] < 0 || mv[1] > 2 || mv[2] < 0 || mv[2] > 2 {
		return Answer{}, fmt.Errorf("%w: move pegs %d, %d outside 0..2", task.ErrMalformed, mv[1], mv[2])
	}
	a.Move = Move{mv[0], mv[1], mv[2]}

	if pegs, ok := fastLists(stateText); ok {
		if a.NextState, ok = fastPegs(pegs); ok {
			if err := checkPegs(a.NextState, n); err != nil {
				return Answer{}, fmt.Errorf("%w: next_state: %v", task.ErrMalformed, err)
			}
			return a, nil
		}
	}
	var lists []json.RawMessage
	if err := json.Unmarshal([]byte(stateText), &lists); err != nil {
		return Answer{}, fmt.Errorf("%w: next_state: %v", task.ErrMalformed, err)
	}
	if len(lists) != 3 {
		return Answer{}, fmt.Errorf("%w: next_state has %d pegs, want 3", task.ErrMalformed, len(lists))
	}
	for i, l := range lists {
		peg, err := intList(string(l))
		if err != nil {
			return Answer{}, fmt.Errorf("%w: next_state peg %d: %v", task.ErrMalformed, i, err)
		}
		a.NextState[i] = peg
	}
	if err := checkPegs(a.NextState, n); err != nil {
		return Answer{}, fmt.Errorf("%w: next_state: %v", task.ErrMalformed, err)
	}
	a.NextState = normPegs(a.NextState)
	return a, nil
}

// lastList returns the bracketed text after the last label in s.
func lastList(s string, label, name string) (string, error) {
	at := lastLabel(s, label)
	if at < 0 {
		return "", fmt.Errorf("%w: no %q line", task.ErrMalformed, name+" =")
	}
	rest := s[at:]
	if len(rest) == 0 || rest[0] != '[' {
		return "", fmt.Errorf("%w: %s is not a list", task.ErrMalformed, name)
	}
	depth := 0
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case '[':
			depth++
			if depth > 2 {
				return "", fmt.Errorf("%w: %s nests too deep", task.ErrMalformed, name)
			}
		case ']':
			depth--
			if depth == 0 {
				return rest[:i+1], nil
			}
		}
	}
	return "", fmt.Errorf("%w: %s list is not closed", task.ErrMalformed, name)
}

func fastPegs(lists [3]string) (p Pegs, ok bool) {
	for i, l := range lists {
		if p[i], ok = fastIntList(l); !ok {
			return Pegs{}, false
		}
	}
	return p, true
}

// lastLabel returns the index just past the last `label\s*=\s*` in s that
// starts at a word boundary, or -1.
func lastLabel(s, label string) int {
	end := len(s)
	for {
		i := strings.LastIndex(s[:end], label)
		if i < 0 {
			return -1
		}
		end = i
		if i > 0 && isWordByte(s[i-1]) {
			continue
		}
		j := skipSpace(s, i+len(label))
		if j < len(s) && s[j] == '=' {
			return skipSpace(s, j+1)
		}
	}
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// skipSpace skips RE2's \s: tab, newline, form feed, carriage return, space.
func skipSpace(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case '\t', '\n', '\f', '\r', ' ':
			i++
		default:
			return i
		}
	}
	return i
}

// fastIntList reads the common well-formed case, a JSON list of plain
// integers, without the JSON decoder; ok is false for anything else, which
// intList then reads (and words the error for).
func fastIntList(s string) (out []int, ok bool) {
	i := jsonSpace(s, 0)
	if i >= len(s) || s[i] != '[' {
		return nil, false
	}
	i = jsonSpace(s, i+1)
	if i < len(s) && s[i] == ']' {
		return []int{}, jsonSpace(s, i+1) == len(s)
	}
	out = make([]int, 0, 8)
	for {
		start := i
		if i < len(s) && s[i] == '-' {
			i++
		}
		digits := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		if i == digits || (s[digits] == '0' && i-digits > 1) || i-digits > 9 {
			return nil, false // no digits, a leading zero, or too long to be a disk
		}
		v, err := strconv.Atoi(s[start:i])
		if err != nil {
			return nil, false
		}
		out = append(out, v)
		i = jsonSpace(s, i)
		if i >= len(s) {
			return nil, false
		}
		switch s[i] {
		case ',':
			i = jsonSpace(s, i+1)
		case ']':
			return out, jsonSpace(s, i+1) == len(s)
		default:
			return nil, false
		}
	}
}

// fastLists splits a list of exactly three lists, "[[..], [..], [..]]",
// without the JSON decoder; ok is false for anything else.
func fastLists(s string) (lists [3]string, ok bool) {
	i := jsonSpace(s, 0)
	if i >= len(s) || s[i] != '[' {
		return lists, false
	}
	for k := 0; k < 3; k++ {
		i = jsonSpace(s, i+1)
		if i >= len(s) || s[i] != '[' {
			return lists, false
		}
		j := strings.IndexByte(s[i:], ']')
		if j < 0 {
			return lists, false
		}
		lists[k] = s[i : i+j+1]
		i = jsonSpace(s, i+j+1)
		want := byte(',')
		if k == 2 {
			want = ']'
		}
		if i >= len(s) || s[i] != want {
			return lists, false
		}
	}
	return lists, jsonSpace(s, i+1) == len(s)
}

// jsonSpace skips JSON whitespace.
func jsonSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// intList decodes a JSON list of plain integers: "1", not "1.0" or "1e0".
func intList(text string) ([]int, error) {
	// A JSON null decodes into a nil slice without error; it is not a list.
	if t := strings.TrimSpace(text); t == "" || t[0] != '[' {
		return nil, fmt.Errorf("%.20q is not a list", text)
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var raw []any
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data")
	}
	out := make([]int, 0, len(raw))
	for _, v := range raw {
		num, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("%v is not an integer", v)
		}
		i, err := strconv.Atoi(string(num))
		if err != nil {
			return nil, fmt.Errorf("%s is not an integer", num)
		}
		out = append(out, i)
	}
	return out, nil
}
