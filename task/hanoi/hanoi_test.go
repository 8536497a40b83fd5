package hanoi_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

func mustNew(t *testing.T, n int) *hanoi.Instance {
	t.Helper()
	in, err := hanoi.New(n)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func mustDecode(t *testing.T, in *hanoi.Instance, s task.State) hanoi.State {
	t.Helper()
	st, err := in.DecodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// reply is what a perfect model would answer.
func reply(m hanoi.Move, next hanoi.Pegs) string {
	return "Following the strategy.\nmove = " + hanoi.FormatMove(m) + "\nnext_state = " + hanoi.FormatPegs(next)
}

// TestStrategySolves runs the whole pipeline a perfect model would drive,
// for odd and even n: a peer once tested odd n with the even-only strategy.
func TestStrategySolves(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 12; n++ {
		in := mustNew(t, n)
		want := int64(1)<<n - 1
		if in.TotalSteps() != want {
			t.Fatalf("n %d: TotalSteps %d, want %d", n, in.TotalSteps(), want)
		}
		dir := 1 // 0→1→2→0 for even n
		if n%2 == 1 {
			dir = 2 // 0→2→1→0 for odd n
		}
		if hanoi.Direction(n) != dir {
			t.Fatalf("n %d: Direction %d, want %d", n, hanoi.Direction(n), dir)
		}
		s := in.Initial()
		var steps int64
		for !in.Done(s) {
			if steps >= want {
				t.Fatalf("n %d: not done after %d steps", n, steps)
			}
			st := mustDecode(t, in, s)
			m, err := hanoi.StrategyMove(st.Pegs, st.Prev, n)
			if err != nil {
				t.Fatalf("n %d step %d: %v", n, steps, err)
			}
			// Disk 1 moves every other step, always the same way round.
			if disk1 := steps%2 == 0; disk1 != (m[0] == 1) {
				t.Fatalf("n %d step %d: move %v, disk 1 should move on even steps only", n, steps, m)
			}
			if m[0] == 1 && m[2] != (m[1]+dir)%3 {
				t.Fatalf("n %d step %d: disk 1 moves %v, want direction +%d", n, steps, m, dir)
			}
			next, err := hanoi.Apply(st.Pegs, m)
			if err != nil {
				t.Fatalf("n %d step %d: strategy move illegal: %v", n, steps, err)
			}
			v, err := in.Parse(s, reply(m, next))
			if err != nil {
				t.Fatalf("n %d step %d: %v", n, steps, err)
			}
			if err := in.Verify(s, v); err != nil {
				t.Fatalf("n %d step %d: Verify: %v", n, steps, err)
			}
			if s, err = in.Next(s, v); err != nil {
				t.Fatalf("n %d step %d: Next: %v", n, steps, err)
			}
			steps++
		}
		if steps != want {
			t.Errorf("n %d: done after %d steps, want %d", n, steps, want)
		}
	}
}

// TestWrongDirectionFails shows what the direction guards against: with the
// other parity's direction the tower never reaches peg 2 in 2^n − 1 moves.
func TestWrongDirectionFails(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 8; n++ {
		in := mustNew(t, n)
		p := mustDecode(t, in, in.Initial()).Pegs
		var prev *hanoi.Move
		for range in.TotalSteps() {
			m, err := hanoi.StrategyMove(p, prev, n+1) // n+1 flips the parity
			if err != nil {
				t.Fatal(err)
			}
			if p, err = hanoi.Apply(p, m); err != nil {
				t.Fatal(err)
			}
			prev = &m
		}
		if in.Done(hanoi.EncodeState(hanoi.State{Pegs: p})) {
			t.Errorf("n %d: the wrong direction solved it too; the parity rule is untested", n)
		}
		if len(p[1]) != n {
			t.Errorf("n %d: wrong direction should stack the tower on peg 1, got %s", n, hanoi.FormatPegs(p))
		}
	}
}

func TestDirectionCycle(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{1: "0 -> 2 -> 1 -> 0", 2: "0 -> 1 -> 2 -> 0", 3: "0 -> 2 -> 1 -> 0", 20: "0 -> 1 -> 2 -> 0"} {
		if got := hanoi.DirectionCycle(n); got != want {
			t.Errorf("DirectionCycle(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	in := mustNew(t, 3)
	s0 := in.Initial()
	// After move 1 (disk 1 to peg 2), the strategy moves disk 2 to peg 1.
	s1 := hanoi.EncodeState(hanoi.State{Pegs: hanoi.Pegs{{3, 2}, {}, {1}}, Prev: &hanoi.Move{1, 0, 2}})
	tests := []struct {
		name    string
		s       task.State
		move    string
		state   string
		wantErr string // "" for a right step
	}{
		{"right first step", s0, "[1, 0, 2]", "[[3, 2], [], [1]]", ""},
		{"right second step", s1, "[2, 0, 1]", "[[3], [2], [1]]", ""},
		{"disk 1 the even way", s0, "[1, 0, 1]", "[[3, 2], [1], []]", "strategy says [1 0 2]"},
		{"disk 1 twice in a row", s1, "[1, 2, 0]", "[[3, 2, 1], [], []]", "strategy says [2 0 1]"},
		{"right move, wrong next_state", s0, "[1, 0, 2]", "[[3, 2], [1], []]", "next_state"},
		{"right move, state unchanged", s0, "[1, 0, 2]", "[[3, 2, 1], [], []]", "next_state"},
		{"right move, pegs reordered", s1, "[2, 0, 1]", "[[3], [2], [1]]", ""},
		{"right move, disks misordered", s1, "[2, 0, 1]", "[[3], [1], [2]]", "next_state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := in.Parse(tt.s, answer(tt.move, tt.state))
			if err != nil {
				t.Fatal(err)
			}
			err = in.Verify(tt.s, v)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, task.ErrWrongStep) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Verify = %v, want ErrWrongStep mentioning %q", err, tt.wantErr)
			}
		})
	}
	if err := in.Verify(s0, task.Vote{Key: "not json"}); !errors.Is(err, task.ErrMalformed) {
		t.Errorf("Verify of a bad key: %v, want ErrMalformed", err)
	}
	if err := in.Verify(json.RawMessage(`{"pegs":[[1],[],[]]}`), task.Vote{Key: firstKey3}); !errors.Is(err, task.ErrInvalidState) {
		t.Errorf("Verify from a bad state: %v, want ErrInvalidState", err)
	}
}

// TestNextTakesStateFromVote: MAKER never recomputes the state. The next
// step starts from the winner's next_state even when it is wrong.
func TestNextTakesStateFromVote(t *testing.T) {
	t.Parallel()
	in := mustNew(t, 3)
	s0 := in.Initial()
	// Right move, but the model put disk 1 on peg 1: not what the move gives.
	v, err := in.Parse(s0, answer("[1, 0, 2]", "[[3], [2], [1]]"))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Verify(s0, v); !errors.Is(err, task.ErrWrongStep) {
		t.Fatalf("Verify = %v; the test needs a wrong next_state", err)
	}
	got, err := in.Next(s0, v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"pegs":[[3],[2],[1]],"prev":[1,0,2]}`
	if string(got) != want {
		t.Errorf("Next = %s, want the vote's own state %s", got, want)
	}
	// The state passed in is ignored: only the vote counts.
	if got2, err := in.Next(json.RawMessage(`garbage`), v); err != nil || string(got2) != want {
		t.Errorf("Next from another state = %s, %v; want %s", got2, err, want)
	}
	// And the next prompt shows that state, not a recomputed one.
	msgs, err := in.Prompt(got)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msgs[1].Content, "Current state: [[3], [2], [1]]") {
		t.Errorf("next prompt does not start from the vote's state:\n%s", msgs[1].Content)
	}

	// A key that is no valid state is refused, not repaired.
	if _, err := in.Next(s0, task.Vote{Key: `{"move":[1,0,2],"next_state":[[3],[],[1]]}`}); !errors.Is(err, task.ErrMalformed) {
		t.Errorf("Next of a key missing a disk: %v, want ErrMalformed", err)
	}
	for _, key := range []string{
		`[`,
		`{"move":[1,0,2],"next_state":[[3],[2],[1],[]]}`,  // a fourth peg
		`{"move":[1,0,2],"next_state":[[3],[2],[1],[4]]}`, // would drop disk 4
		`{"move":[1,0],"next_state":[[3],[2],[1]]}`,       // would zero-fill
		`{"move":[1,0,2,0],"next_state":[[3],[2],[1]]}`,   // would truncate
		`{"move":[1,0,2],"next_state":[[3],[2]]}`,
	} {
		if _, err := in.Next(s0, task.Vote{Key: key}); !errors.Is(err, task.ErrMalformed) {
			t.Errorf("Next(%s): %v, want ErrMalformed", key, err)
		}
	}
}

func TestBind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw       string
		wantDisks int // 0: must fail
	}{
		{`{"disks":3}`, 3},
		{`{"disks": 1}`, 1},
		{` {"disks" : 30} ` + "\n", 30},
		{`{"disks":0}`, 0},
		{`{"disks":31}`, 0},
		{`{"disks":-1}`, 0},
		{`{"disks":"x"}`, 0},
		{`{"disks":"3"}`, 0},
		{`{"disks":3.5}`, 0},
		{`{"disks":1e1}`, 0},
		{`{"disks":3,"pegs":3}`, 0},
		{`{"n":3}`, 0},
		{`{}`, 0},
		{`null`, 0},
		{`[]`, 0},
		{`3`, 0},
		{`disks=3`, 0},
		{``, 0},
		{`{"disks":3`, 0},
		{`{"disks":3} trailing`, 0},
		{`{"disks":3}{"disks":4}`, 0},
		{`{"disks":3}}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			t.Parallel()
			in, err := hanoi.Task{}.Bind(json.RawMessage(tt.raw))
			if tt.wantDisks == 0 {
				if err == nil {
					t.Fatalf("Bind(%s) accepted: %s", tt.raw, in.Params())
				}
				if !errors.Is(err, task.ErrInvalidParams) {
					t.Errorf("Bind(%s) error %v, want ErrInvalidParams", tt.raw, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Bind(%s): %v", tt.raw, err)
			}
			if d := in.(*hanoi.Instance).Disks(); d != tt.wantDisks {
				t.Errorf("Bind(%s): %d disks, want %d", tt.raw, d, tt.wantDisks)
			}
			if want := `{"disks":` + itoa(tt.wantDisks) + `}`; string(in.Params()) != want {
				t.Errorf("Params() = %s, want %s", in.Params(), want)
			}
		})
	}
	if name := (hanoi.Task{}).Name(); name != "hanoi" {
		t.Errorf("Name() = %q", name)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestPrompt(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 4} {
		in := mustNew(t, n)
		msgs, err := in.Prompt(in.Initial())
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
			t.Fatalf("n %d: messages %+v, want system then user", n, msgs)
		}
		sys, user := msgs[0].Content, msgs[1].Content
		for _, want := range []string{"move = [disk, from, to]", "next_state = [[...], [...], [...]]", hanoi.DirectionCycle(n), itoa(n) + " disks"} {
			if !strings.Contains(sys, want) {
				t.Errorf("n %d: system prompt lacks %q", n, want)
			}
		}
		start := hanoi.FormatPegs(mustDecode(t, in, in.Initial()).Pegs)
		for _, want := range []string{"Previous move: none", "Current state: " + start} {
			if !strings.Contains(user, want) {
				t.Errorf("n %d: user prompt lacks %q:\n%s", n, want, user)
			}
		}
	}

	in := mustNew(t, 3)
	s := hanoi.EncodeState(hanoi.State{Pegs: hanoi.Pegs{{3}, {2}, {1}}, Prev: &hanoi.Move{2, 0, 1}})
	msgs, err := in.Prompt(s)
	if err != nil {
		t.Fatal(err)
	}
	user := msgs[1].Content
	// One plain-list format throughout: as the answer is written, not as the
	// wire JSON.
	for _, want := range []string{"Previous move: move = [2, 0, 1]", "Current state: [[3], [2], [1]]"} {
		if !strings.Contains(user, want) {
			t.Errorf("user prompt lacks %q:\n%s", want, user)
		}
	}
	for _, bad := range []string{"pegs", "prev", "[[3],[2]"} {
		if strings.Contains(user, bad) {
			t.Errorf("user prompt leaks wire format %q:\n%s", bad, user)
		}
	}
	// Only what the step needs: no history.
	if strings.Count(user, "move =") != 1 {
		t.Errorf("user prompt holds more than the previous move:\n%s", user)
	}
	if _, err := in.Prompt(json.RawMessage(`{"pegs":[[3,2],[],[]]}`)); !errors.Is(err, task.ErrInvalidState) {
		t.Errorf("Prompt of a bad state: %v, want ErrInvalidState", err)
	}
}

func TestInitialDone(t *testing.T) {
	t.Parallel()
	in := mustNew(t, 3)
	if got := string(in.Initial()); got != `{"pegs":[[3,2,1],[],[]]}` {
		t.Errorf("Initial() = %s", got)
	}
	tests := []struct {
		state string
		done  bool
	}{
		{`{"pegs":[[],[],[3,2,1]]}`, true},
		{`{"pegs":[[],[],[3,2,1]],"prev":[1,0,2]}`, true},
		{`{"pegs":[[3,2,1],[],[]]}`, false},
		{`{"pegs":[[],[3,2,1],[]]}`, false},
		{`{"pegs":[[],[],[1,2,3]]}`, false}, // all there but upside down
		{`{"pegs":[[],[],[3,2]]}`, false},
		{`{"pegs":[[],[],[4,3,2,1]]}`, false},
		{`not json`, false},
	}
	for _, tt := range tests {
		if got := in.Done(json.RawMessage(tt.state)); got != tt.done {
			t.Errorf("Done(%s) = %v, want %v", tt.state, got, tt.done)
		}
	}
}

func TestDecodeStateRejects(t *testing.T) {
	t.Parallel()
	in := mustNew(t, 3)
	for _, s := range []string{
		`not json`, `null`, `{}`, `{"pegs":[[3,2],[],[]]}`, `{"pegs":[[3,2,1,1],[],[]]}`,
		`{"pegs":[[3,2,4],[],[1]]}`, `{"pegs":[[3,2,1],[],[],[]]}`, `{"pegs":[[3,2],[],[1],[4]]}`,
		`{"pegs":[[3,2,1],[]]}`, `{"pegs":[[3,2,1],[],[]],"prev":[1,0]}`,
	} {
		if _, err := in.DecodeState(json.RawMessage(s)); !errors.Is(err, task.ErrInvalidState) {
			t.Errorf("DecodeState(%s) = %v, want ErrInvalidState", s, err)
		}
	}
}

func TestApplyRejects(t *testing.T) {
	t.Parallel()
	p := hanoi.Pegs{{3, 2}, {}, {1}}
	for _, tt := range []struct {
		m    hanoi.Move
		want string
	}{
		{hanoi.Move{2, 0, 0}, "bad pegs"},
		{hanoi.Move{2, 0, 3}, "bad pegs"},
		{hanoi.Move{2, -1, 1}, "bad pegs"},
		{hanoi.Move{3, 0, 1}, "not on top"},
		{hanoi.Move{2, 0, 2}, "on smaller disk 1"},
		{hanoi.Move{0, 1, 2}, "peg 1 is empty"}, // used to panic
		{hanoi.Move{1, 1, 0}, "peg 1 is empty"},
	} {
		if _, err := hanoi.Apply(p, tt.m); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Apply(%v) = %v, want error mentioning %q", tt.m, err, tt.want)
		}
	}
	// Apply must not alter its input.
	if _, err := hanoi.Apply(p, hanoi.Move{2, 0, 1}); err != nil || hanoi.FormatPegs(p) != "[[3, 2], [], [1]]" {
		t.Errorf("Apply changed its input or failed: %s, %v", hanoi.FormatPegs(p), err)
	}
}

func TestStrategyMoveRejects(t *testing.T) {
	t.Parallel()
	prev := &hanoi.Move{1, 0, 2}
	if _, err := hanoi.StrategyMove(hanoi.Pegs{{1, 3}, {2}, {}}, nil, 3); err == nil {
		t.Error("StrategyMove with disk 1 buried: no error")
	}
	if _, err := hanoi.StrategyMove(hanoi.Pegs{{}, {}, {1}}, prev, 1); err == nil {
		t.Error("StrategyMove with no move but disk 1's: no error")
	}
}

// TestNextRejectsUnreadableKeys: the coordinator checks every vote a voter
// sends with Next before counting it, so Next must refuse any key Parse
// could not have produced: another spelling of a valid answer (it would
// split that answer's votes), and moves outside the disks and pegs. Keys
// Parse produces pass, right or wrong: Next does not judge the step.
func TestNextRejectsUnreadableKeys(t *testing.T) {
	t.Parallel()
	in := mustNew(t, 3)
	s0 := in.Initial()
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"canonical right answer", firstKey3, true},
		{"canonical wrong answer (Verify's business, not Next's)", `{"move":[1,0,1],"next_state":[[3,2],[1],[]]}`, true},
		{"biggest disk to the last peg", `{"move":[3,0,2],"next_state":[[],[],[3,2,1]]}`, true},
		{"not JSON", "garbage-key", false},
		{"empty", "", false},
		{"null", "null", false},
		{"spaces after colons", `{"move": [1,0,2], "next_state": [[3,2],[],[1]]}`, false},
		{"spaces in the lists", `{"move":[1, 0, 2],"next_state":[[3, 2], [], [1]]}`, false},
		{"fields swapped", `{"next_state":[[3,2],[],[1]],"move":[1,0,2]}`, false},
		{"extra field", `{"move":[1,0,2],"next_state":[[3,2],[],[1]],"why":"x"}`, false},
		{"escaped field name", `{"mov\u0065":[1,0,2],"next_state":[[3,2],[],[1]]}`, false},
		{"trailing newline", firstKey3 + "\n", false},
		{"disk 0", `{"move":[0,0,2],"next_state":[[3,2],[],[1]]}`, false},
		{"disk above n", `{"move":[4,0,2],"next_state":[[3,2],[],[1]]}`, false},
		{"negative disk", `{"move":[-1,0,2],"next_state":[[3,2],[],[1]]}`, false},
		{"from peg 3", `{"move":[1,3,2],"next_state":[[3,2],[],[1]]}`, false},
		{"from peg -1", `{"move":[1,-1,2],"next_state":[[3,2],[],[1]]}`, false},
		{"to peg 3", `{"move":[1,0,3],"next_state":[[3,2],[],[1]]}`, false},
		{"to peg -1", `{"move":[1,0,-1],"next_state":[[3,2],[],[1]]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			next, err := in.Next(s0, task.Vote{Key: tt.key})
			if tt.ok {
				if err != nil {
					t.Fatalf("Next(%s): %v, want it accepted", tt.key, err)
				}
				if _, err := in.DecodeState(next); err != nil {
					t.Errorf("Next(%s) = %s, not a state: %v", tt.key, next, err)
				}
				return
			}
			if !errors.Is(err, task.ErrMalformed) {
				t.Errorf("Next(%q) = %s, %v; want ErrMalformed", tt.key, next, err)
			}
		})
	}
	// Whatever Parse reads, in any spelling, Next accepts: the check never
	// refuses a vote a voter could honestly send.
	for _, reply := range []string{
		answer("[1, 0, 2]", "[[3, 2], [], [1]]"),
		answer("[1,0,2]", "[[3,2],[],[1]]"),
		"move = [ 1 , 0 , 2 ]\nnext_state = [ [ 3 , 2 ] , [ ] , [ 1 ] ]",
	} {
		v, err := in.Parse(s0, reply)
		if err != nil {
			t.Fatalf("Parse(%q): %v", reply, err)
		}
		if _, err := in.Next(s0, v); err != nil {
			t.Errorf("Next of Parse(%q) = key %s: %v", reply, v.Key, err)
		}
	}
}
