package hanoi

import (
	"encoding/json"
	"testing"
)

// reflectKey and reflectState are the encoding/json forms Key and
// encodeState must equal byte for byte (vote keys and states are compared
// and hashed as bytes: a journal from before reads the same).
func reflectKey(a Answer) string {
	b, err := json.Marshal(Answer{Move: a.Move, NextState: normPegs(a.NextState)})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func reflectState(st State) string {
	st.Pegs = normPegs(st.Pegs)
	b, err := json.Marshal(st)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestEncodeMatchesJSON(t *testing.T) {
	prev := Move{1, 0, 2}
	for _, tc := range []struct {
		name string
		pegs Pegs
		move Move
		prev *Move
	}{
		{"start", Pegs{{3, 2, 1}, nil, nil}, Move{1, 0, 2}, nil},
		{"empty pegs as []", Pegs{{}, {}, {}}, Move{}, &prev},
		{"mid-run", Pegs{{20, 19, 4}, {3}, {2, 1}}, Move{12, 2, 1}, &prev},
		{"negative and big numbers", Pegs{{-1, 1 << 40}, {0}, nil}, Move{-7, 1 << 33, 0}, &Move{-1, -2, -3}},
	} {
		a := Answer{Move: tc.move, NextState: tc.pegs}
		if got, want := a.Key(), reflectKey(a); got != want {
			t.Errorf("%s: Key() = %s, want %s", tc.name, got, want)
		}
		st := State{Pegs: tc.pegs, Prev: tc.prev}
		if got, want := string(encodeState(st)), reflectState(st); got != want {
			t.Errorf("%s: encodeState = %s, want %s", tc.name, got, want)
		}
	}
}

func FuzzEncodeMatchesJSON(f *testing.F) {
	f.Add([]byte{3, 2, 1}, []byte{}, []byte{}, int64(1), int64(0), int64(2), true)
	f.Add([]byte{}, []byte{5}, []byte{255, 0}, int64(-1), int64(1<<40), int64(0), false)
	f.Fuzz(func(t *testing.T, p0, p1, p2 []byte, m0, m1, m2 int64, withPrev bool) {
		ints := func(b []byte) []int {
			if len(b) == 0 && len(p0)%2 == 0 {
				return nil // a nil peg as well as an empty one
			}
			out := make([]int, len(b))
			for i, v := range b {
				out[i] = int(v) - 128
			}
			return out
		}
		pegs := Pegs{ints(p0), ints(p1), ints(p2)}
		move := Move{int(m0), int(m1), int(m2)}
		a := Answer{Move: move, NextState: pegs}
		if got, want := a.Key(), reflectKey(a); got != want {
			t.Fatalf("Key() = %s, want %s", got, want)
		}
		st := State{Pegs: pegs}
		if withPrev {
			st.Prev = &Move{int(m2), int(m0), int(m1)}
		}
		if got, want := string(encodeState(st)), reflectState(st); got != want {
			t.Fatalf("encodeState = %s, want %s", got, want)
		}
	})
}

func BenchmarkKey(b *testing.B) {
	a := Answer{Move: Move{1, 0, 2}, NextState: Pegs{{20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2}, {}, {1}}}
	b.Run("hand-written", func(b *testing.B) {
		for b.Loop() {
			_ = a.Key()
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			_ = reflectKey(a)
		}
	})
}
