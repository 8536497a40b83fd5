package hanoi_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// answer builds the two answer lines.
func answer(move, state string) string {
	return "move = " + move + "\nnext_state = " + state
}

const firstKey3 = `{"move":[1,0,2],"next_state":[[3,2],[],[1]]}`

func TestParseAnswerAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		reply string
		n     int
		want  string // vote key
	}{
		{"plain", answer("[1, 0, 2]", "[[3, 2], [], [1]]"), 3, firstKey3},
		{
			"last of each wins over reasoning",
			"Disk 1 could go with move = [1, 0, 1], giving next_state = [[3, 2], [1], []],\n" +
				"but the cycle for 3 disks is 0 -> 2 -> 1, so not move = [1,0,1].\n" +
				answer("[1, 0, 2]", "[[3, 2], [], [1]]"),
			3, firstKey3,
		},
		{
			"earlier malformed ones do not matter",
			"move = [1, 0\nnext_state = [[3, 2]\n" + answer("[1, 0, 2]", "[[3, 2], [], [1]]"),
			3, firstKey3,
		},
		{"no spaces", "move=[1,0,2]\nnext_state=[[3,2],[],[1]]", 3, firstKey3},
		{
			"newlines and tabs inside",
			"move =\n[ 1 ,\t0 , 2 ]\n\nnext_state =\n[\n  [3, 2],\n  [],\n  [1]\n]\n",
			3, firstKey3,
		},
		{"CRLF", "reasoning\r\nmove = [1, 0, 2]\r\nnext_state = [[3, 2], [], [1]]\r\n", 3, firstKey3},
		{"state before move", "next_state = [[3, 2], [], [1]]\nmove = [1, 0, 2]", 3, firstKey3},
		{"text after the lists", answer("[1, 0, 2]", "[[3, 2], [], [1]]") + "  (done)\n", 3, firstKey3},
		{"one disk", answer("[1, 0, 2]", "[[], [], [1]]"), 1, `{"move":[1,0,2],"next_state":[[],[],[1]]}`},
		// The parser checks form, not legality: voting handles wrong moves.
		{"illegal but well formed", answer("[3, 0, 1]", "[[1, 2], [3], []]"), 3, `{"move":[3,0,1],"next_state":[[1,2],[3],[]]}`},
		{"peg order not checked", answer("[1, 0, 2]", "[[2, 3], [], [1]]"), 3, `{"move":[1,0,2],"next_state":[[2,3],[],[1]]}`},
		{"negative zero peg", answer("[1, -0, 2]", "[[3, 2], [], [1]]"), 3, firstKey3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := hanoi.ParseAnswer(tt.reply, tt.n)
			if err != nil {
				t.Fatalf("ParseAnswer: %v\nreply:\n%s", err, tt.reply)
			}
			if got := a.Key(); got != tt.want {
				t.Errorf("key %s, want %s", got, tt.want)
			}
			in, err := hanoi.New(tt.n)
			if err != nil {
				t.Fatal(err)
			}
			v, err := in.Parse(in.Initial(), tt.reply)
			if err != nil || v.Key != tt.want {
				t.Errorf("Instance.Parse = %q, %v; want %s", v.Key, err, tt.want)
			}
		})
	}
}

func TestParseAnswerRejects(t *testing.T) {
	t.Parallel()
	const okMove, okState = "[1, 0, 2]", "[[3, 2], [], [1]]"
	tests := []struct {
		name  string
		reply string
		want  string // in the error
	}{
		{"empty reply", "", "no \"move =\" line"},
		{"no move line", "next_state = " + okState, "no \"move =\" line"},
		{"no state line", "move = " + okMove, "no \"next_state =\" line"},
		{"Move capitalised", "Move = [1, 0, 2]\nnext_state = " + okState, "no \"move =\" line"},
		{"label inside a word", "remove = [1, 0, 2]\nnext_state = " + okState, "no \"move =\" line"},

		// move: exactly three integers, disk 1..n, pegs 0..2.
		{"move two numbers", answer("[1, 0]", okState), "move has 2 numbers"},
		{"move four numbers", answer("[1, 0, 2, 0]", okState), "move has 4 numbers"},
		{"move empty", answer("[]", okState), "move has 0 numbers"},
		{"move float", answer("[1.0, 0, 2]", okState), "1.0 is not an integer"},
		{"move exponent", answer("[1e0, 0, 2]", okState), "1e0 is not an integer"},
		{"move string", answer(`["1", 0, 2]`, okState), "not an integer"},
		{"move bool", answer("[true, 0, 2]", okState), "not an integer"},
		{"move null element", answer("[null, 0, 2]", okState), "not an integer"},
		{"move nested", answer("[[1], 0, 2]", okState), "not an integer"},
		{"move too deep", answer("[[[1]], 0, 2]", okState), "move nests too deep"},
		{"move overflow", answer("[99999999999999999999, 0, 2]", okState), "not an integer"},
		{"move negative disk", answer("[-1, 0, 2]", okState), "disk -1 outside 1..3"},
		{"move disk zero", answer("[0, 0, 2]", okState), "disk 0 outside 1..3"},
		{"move disk above n", answer("[4, 0, 2]", okState), "disk 4 outside 1..3"},
		{"move negative peg", answer("[1, -1, 2]", okState), "outside 0..2"},
		{"move peg three", answer("[1, 0, 3]", okState), "outside 0..2"},
		{"move tuple", answer("(1, 0, 2)", okState), "move is not a list"},
		{"move bare numbers", answer("1, 0, 2", okState), "move is not a list"},
		{"move unclosed", "next_state = " + okState + "\nmove = [1, 0, 2", "move list is not closed"},
		{"move unclosed before state", answer("[1, 0, 2", okState), "move"},
		{"move trailing comma", answer("[1, 0, 2,]", okState), "move"},

		// next_state: exactly three lists holding 1..n once each.
		{"state two pegs", answer(okMove, "[[3, 2, 1], []]"), "next_state has 2 pegs"},
		{"state four pegs", answer(okMove, "[[3, 2], [], [1], []]"), "next_state has 4 pegs"},
		{"state empty", answer(okMove, "[]"), "next_state has 0 pegs"},
		{"state duplicate", answer(okMove, "[[3, 2], [2], [1]]"), "disk 2 appears twice"},
		{"state missing disk", answer(okMove, "[[3], [], [1]]"), "holds 2 disks, want 3"},
		{"state extra disk", answer(okMove, "[[4, 3, 2], [], [1]]"), "disk 4 outside 1..3"},
		{"state zero", answer(okMove, "[[3, 2, 0], [], [1]]"), "disk 0 outside 1..3"},
		{"state negative", answer(okMove, "[[3, -2], [], [1]]"), "disk -2 outside 1..3"},
		{"state float", answer(okMove, "[[3, 2.0], [], [1]]"), "2.0 is not an integer"},
		{"state exponent", answer(okMove, "[[3, 2e0], [], [1]]"), "2e0 is not an integer"},
		{"state string", answer(okMove, `[[3, "2"], [], [1]]`), "not an integer"},
		{"state null peg", answer(okMove, "[[3, 2], null, [1]]"), "is not a list"},
		{"state number peg", answer(okMove, "[[3, 2], 0, [1]]"), "is not a list"},
		{"state object peg", answer(okMove, "[[3, 2], {}, [1]]"), "is not a list"},
		{"state flat", answer(okMove, "[3, 2, 1]"), "is not a list"},
		{"state unclosed", answer(okMove, "[[3, 2], [], [1]"), "next_state list is not closed"},
		{"state unclosed peg", answer(okMove, "[[3, 2], [], [1"), "next_state list is not closed"},
		{"state deeper nesting", answer(okMove, "[[[3], 2], [], [1]]"), "next_state nests too deep"},
		{"state not a list", answer(okMove, "none"), "next_state is not a list"},
		{"state python tuple", answer(okMove, "([3, 2], [], [1])"), "next_state is not a list"},

		// The last occurrence is the answer, even when an earlier one was fine.
		{
			"last state malformed",
			answer(okMove, okState) + "\nOn second thought:\nnext_state = [[3, 2], [1]]",
			"next_state has 2 pegs",
		},
		{
			"last move malformed",
			answer(okMove, okState) + "\nmove = [1, 0]",
			"move has 2 numbers",
		},
		{
			"last move label has no list",
			answer(okMove, okState) + "\nThe next move = ?",
			"move is not a list",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := hanoi.ParseAnswer(tt.reply, 3)
			if err == nil {
				t.Fatalf("ParseAnswer accepted %s\nreply:\n%s", a.Key(), tt.reply)
			}
			if !errors.Is(err, task.ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestVoteKeyIsPair: the vote is the (move, next_state) pair, so the same
// move with another next_state is another candidate, and spacing is not.
func TestVoteKeyIsPair(t *testing.T) {
	t.Parallel()
	in, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	key := func(reply string) string {
		t.Helper()
		v, err := in.Parse(in.Initial(), reply)
		if err != nil {
			t.Fatal(err)
		}
		return v.Key
	}
	a := key(answer("[1, 0, 2]", "[[3, 2], [], [1]]"))
	b := key(answer("[1,0,2]", "[[3,2],[],[1]]"))
	c := key(answer("[1, 0, 2]", "[[3, 2], [1], []]"))
	if a != b {
		t.Errorf("same answer, different spacing: keys %s and %s", a, b)
	}
	if a == c {
		t.Errorf("same move, different next_state: both key %s", a)
	}
}
