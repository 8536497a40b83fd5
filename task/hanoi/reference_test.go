package hanoi_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// TestReferenceChainSolves follows ReferenceVote from Initial through Next
// to Done, for odd and even n, and checks at every step that the key is the
// one Parse gives a perfect reply, that Verify accepts it, and that the state
// reached is OptimalState's, computed without walking.
func TestReferenceChainSolves(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 12; n++ {
		in := mustNew(t, n)
		s := in.Initial()
		var step int64
		for ; !in.Done(s); step++ {
			if step >= in.TotalSteps() {
				t.Fatalf("n %d: not done after %d steps", n, step)
			}
			if want := hanoi.EncodeState(hanoi.OptimalState(n, step)); string(s) != string(want) {
				t.Fatalf("n %d step %d: walked to %s, OptimalState says %s", n, step, s, want)
			}
			v, err := in.ReferenceVote(s)
			if err != nil {
				t.Fatalf("n %d step %d: ReferenceVote: %v", n, step, err)
			}
			if err := in.Verify(s, v); err != nil {
				t.Fatalf("n %d step %d: Verify rejects the reference %s: %v", n, step, v.Key, err)
			}
			a, err := hanoi.DecodeAnswer(v.Key)
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := in.Parse(s, reply(a.Move, a.NextState))
			if err != nil || parsed != v {
				t.Fatalf("n %d step %d: Parse of the reference reply = %q, %v; want %q", n, step, parsed.Key, err, v.Key)
			}
			if s, err = in.Next(s, v); err != nil {
				t.Fatalf("n %d step %d: Next refuses the reference %s: %v", n, step, v.Key, err)
			}
		}
		if step != in.TotalSteps() {
			t.Errorf("n %d: solved in %d steps, want %d", n, step, in.TotalSteps())
		}
		if want := hanoi.EncodeState(hanoi.OptimalState(n, step)); string(s) != string(want) {
			t.Errorf("n %d: goal %s, OptimalState says %s", n, s, want)
		}
	}
}

func TestReferenceVote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		n     int
		state string
		want  string // key, or "" when an error is wanted
		err   error
	}{
		{"odd n starts towards peg 2", 3, `{"pegs":[[3,2,1],[],[]]}`, `{"move":[1,0,2],"next_state":[[3,2],[],[1]]}`, nil},
		{"even n starts towards peg 1", 4, `{"pegs":[[4,3,2,1],[],[]]}`, `{"move":[1,0,1],"next_state":[[4,3,2],[1],[]]}`, nil},
		{"after disk 1 the other move", 3, `{"pegs":[[3,2],[],[1]],"prev":[1,0,2]}`, `{"move":[2,0,1],"next_state":[[3],[2],[1]]}`, nil},
		{"non-canonical spelling is read", 3, `{ "prev": [1,0,2], "pegs": [[3,2],[],[1]] }`, `{"move":[2,0,1],"next_state":[[3],[2],[1]]}`, nil},
		{"goal has no move", 3, `{"pegs":[[],[],[3,2,1]],"prev":[1,0,2]}`, "", task.ErrNoReference},
		{"pegs out of order", 3, `{"pegs":[[1,2],[3],[]],"prev":[1,0,2]}`, "", task.ErrNoReference},
		{"not a state", 3, `[]`, "", task.ErrInvalidState},
		{"wrong disks", 3, `{"pegs":[[3,2],[],[]]}`, "", task.ErrInvalidState},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := mustNew(t, tt.n)
			v, err := in.ReferenceVote(task.State(tt.state))
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("ReferenceVote = %q, %v; want an error wrapping %v", v.Key, err, tt.err)
				}
				return
			}
			if err != nil || v.Key != tt.want {
				t.Fatalf("ReferenceVote = %q, %v; want %q", v.Key, err, tt.want)
			}
		})
	}
}

func TestOptimalState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n    int
		step int64
		want string
	}{
		{1, 0, `{"pegs":[[1],[],[]]}`},
		{1, 1, `{"pegs":[[],[],[1]],"prev":[1,0,2]}`},
		{2, 1, `{"pegs":[[2],[1],[]],"prev":[1,0,1]}`},
		{2, 2, `{"pegs":[[],[1],[2]],"prev":[2,0,2]}`},
		{3, 4, `{"pegs":[[],[2,1],[3]],"prev":[3,0,2]}`},
		{30, 1<<30 - 1, `{"pegs":[[],[],[30,29,28,27,26,25,24,23,22,21,20,19,18,17,16,15,14,13,12,11,10,9,8,7,6,5,4,3,2,1]],"prev":[1,1,2]}`}, // even n: disk 1 last moves 1→2
	}
	for _, tt := range tests {
		if got := string(hanoi.EncodeState(hanoi.OptimalState(tt.n, tt.step))); got != tt.want {
			t.Errorf("OptimalState(%d, %d) = %s, want %s", tt.n, tt.step, got, tt.want)
		}
	}
	for _, bad := range []struct {
		n    int
		step int64
	}{{0, 0}, {31, 0}, {3, -1}, {3, 8}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("OptimalState(%d, %d) did not panic", bad.n, bad.step)
				}
			}()
			hanoi.OptimalState(bad.n, bad.step)
		}()
	}
}

// TestDrawStateProperty: every drawn state, for any n, is the optimal
// path's state at the drawn step, and its reference vote is accepted by
// Next and Verify.
func TestDrawStateProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(12, 1))
	for i := range 3000 {
		n := 1 + rng.IntN(hanoi.MaxDisks)
		in := mustNew(t, n)
		s, step, err := in.DrawState(rng)
		if err != nil {
			t.Fatal(err)
		}
		if step < 0 || step >= in.TotalSteps() {
			t.Fatalf("draw %d (n %d): step %d outside [0, %d)", i, n, step, in.TotalSteps())
		}
		st := mustDecode(t, in, s)
		if at, ok := hanoi.StepOf(st.Pegs, n); !ok || at != step {
			t.Fatalf("draw %d (n %d): StepOf = %d, %v; drawn step %d", i, n, at, ok, step)
		}
		if (step == 0) != (st.Prev == nil) {
			t.Fatalf("draw %d (n %d): step %d with prev %v", i, n, step, st.Prev)
		}
		if in.Done(s) {
			t.Fatalf("draw %d (n %d): drew the goal", i, n)
		}
		v, err := in.ReferenceVote(s)
		if err != nil {
			t.Fatalf("draw %d (n %d) %s: %v", i, n, s, err)
		}
		if err := in.Verify(s, v); err != nil {
			t.Fatalf("draw %d (n %d) %s: Verify: %v", i, n, s, err)
		}
		next, err := in.Next(s, v)
		if err != nil {
			t.Fatalf("draw %d (n %d): Next: %v", i, n, err)
		}
		if want := hanoi.EncodeState(hanoi.OptimalState(n, step+1)); string(next) != string(want) {
			t.Fatalf("draw %d (n %d): next %s, OptimalState(step+1) %s", i, n, next, want)
		}
	}
}

// TestDrawStateUniform: all 2^n − 1 steps of a small instance are drawn,
// each about equally often (a loose bound: 7 steps, 7,000 draws, each count
// within 1,000 ± 200, over 6 standard deviations).
func TestDrawStateUniform(t *testing.T) {
	t.Parallel()
	in := mustNew(t, 3)
	rng := rand.New(rand.NewPCG(3, 3))
	counts := make(map[int64]int)
	for range 7000 {
		_, step, err := in.DrawState(rng)
		if err != nil {
			t.Fatal(err)
		}
		counts[step]++
	}
	for step := range in.TotalSteps() {
		if c := counts[step]; c < 800 || c > 1200 {
			t.Errorf("step %d drawn %d times of 7000, want 1000 ± 200", step, c)
		}
	}
}

func BenchmarkOptimalState(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		hanoi.OptimalState(20, int64(i)%(1<<20-1))
	}
}
