package hanoi

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/task"
)

var (
	moveLabel  = regexp.MustCompile(`\bmove\s*=\s*`)
	stateLabel = regexp.MustCompile(`\bnext_state\s*=\s*`)
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
	mv, err := intList(moveText)
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
func lastList(s string, label *regexp.Regexp, name string) (string, error) {
	locs := label.FindAllStringIndex(s, -1)
	if len(locs) == 0 {
		return "", fmt.Errorf("%w: no %q line", task.ErrMalformed, name+" =")
	}
	rest := s[locs[len(locs)-1][1]:]
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
