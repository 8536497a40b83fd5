package hanoi

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// refParse is the parser's specification written the slow, obvious way
// (regexps and the JSON decoder); the fast scanner must agree with it.
func refParse(reply string, n int) (string, bool) {
	last := func(re *regexp.Regexp) (string, bool) {
		locs := re.FindAllStringIndex(reply, -1)
		if len(locs) == 0 {
			return "", false
		}
		rest := reply[locs[len(locs)-1][1]:]
		depth := 0
		for i := 0; i < len(rest); i++ {
			switch rest[i] {
			case '[':
				depth++
				if depth > 2 {
					return "", false
				}
			case ']':
				depth--
				if depth == 0 {
					return rest[:i+1], true
				}
			}
			if i == 0 && rest[0] != '[' {
				return "", false
			}
		}
		return "", false
	}
	ints := func(text string) ([]int, bool) {
		if t := strings.TrimSpace(text); t == "" || t[0] != '[' {
			return nil, false
		}
		dec := json.NewDecoder(strings.NewReader(text))
		dec.UseNumber()
		var raw []any
		if dec.Decode(&raw) != nil || dec.More() {
			return nil, false
		}
		out := []int{}
		for _, v := range raw {
			num, ok := v.(json.Number)
			if !ok {
				return nil, false
			}
			i, err := strconv.Atoi(string(num))
			if err != nil {
				return nil, false
			}
			out = append(out, i)
		}
		return out, true
	}
	mt, ok1 := last(regexp.MustCompile(`\bmove\s*=\s*`))
	st, ok2 := last(regexp.MustCompile(`\bnext_state\s*=\s*`))
	if !ok1 || !ok2 {
		return "", false
	}
	mv, ok := ints(mt)
	if !ok || len(mv) != 3 || mv[0] < 1 || mv[0] > n || mv[1] < 0 || mv[1] > 2 || mv[2] < 0 || mv[2] > 2 {
		return "", false
	}
	var lists []json.RawMessage
	if json.Unmarshal([]byte(st), &lists) != nil || len(lists) != 3 {
		return "", false
	}
	var a Answer
	a.Move = Move{mv[0], mv[1], mv[2]}
	for i, l := range lists {
		peg, ok := ints(string(l))
		if !ok {
			return "", false
		}
		a.NextState[i] = peg
	}
	if checkPegs(a.NextState, n) != nil {
		return "", false
	}
	return a.Key(), true
}

func FuzzParseMatchesReference(f *testing.F) {
	for _, s := range []string{
		"move = [1, 0, 2]\nnext_state = [[3, 2], [], [1]]",
		"move=[1,0,2] next_state=[[3,2],[],[1]]",
		"remove = [1, 0, 2]\nnext_state = [[3, 2], [], [1]]",
		"move = [1, 0, 2]\nnext_state = [[3, 2], [ ], [1]] trailing",
		"move = [01, 0, 2]\nnext_state = [[3, 2], [], [1]]",
		"move = [-0, 0, 2]\nnext_state = [[3, 2], [], [1]]",
		"move = [1, 0, 2]\nnext_state = [[3, 2], [], [1], []]",
		"move = [1, 0, 2]\nnext_state =\t[[3,\n2],[],\r[1]]",
		"move = [1.0, 0, 2]\nnext_state = [[3, 2], [], [1]]",
		"move = [1, 0, 2]\nnext_state = [[3, 2], null, [1]]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		want, wantOK := refParse(reply, 3)
		got, err := ParseAnswer(reply, 3)
		if (err == nil) != wantOK {
			t.Fatalf("ParseAnswer ok=%v (%v), reference ok=%v\nreply %q", err == nil, err, wantOK, reply)
		}
		if wantOK && got.Key() != want {
			t.Fatalf("key %s, reference %s\nreply %q", got.Key(), want, reply)
		}
	})
}

// FuzzFastDecodersMatchJSON: the hand-written state and vote-key readers
// agree with encoding/json on everything they accept.
func FuzzFastDecodersMatchJSON(f *testing.F) {
	f.Add(`{"pegs":[[3,2,1],[],[]]}`)
	f.Add(`{"pegs":[[3,2],[],[1]],"prev":[1,0,2]}`)
	f.Add(`{"move":[1,0,2],"next_state":[[3,2],[],[1]]}`)
	f.Add(`{"pegs":[[3,2],[],[1]],"prev":[1,0,2,4]}`)
	f.Fuzz(func(t *testing.T, s string) {
		if st, ok := fastState(s); ok {
			var want State
			if err := json.Unmarshal([]byte(s), &want); err != nil {
				t.Fatalf("fastState accepted %q, json says %v", s, err)
			}
			if string(EncodeState(st)) != string(EncodeState(want)) {
				t.Fatalf("fastState(%q) = %s, json %s", s, EncodeState(st), EncodeState(want))
			}
		}
		if a, ok := fastAnswer(s); ok {
			var want Answer
			if err := json.Unmarshal([]byte(s), &want); err != nil {
				t.Fatalf("fastAnswer accepted %q, json says %v", s, err)
			}
			if a.Key() != want.Key() {
				t.Fatalf("fastAnswer(%q) = %s, json %s", s, a.Key(), want.Key())
			}
		}
	})
}
