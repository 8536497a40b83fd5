package hanoi

import (
	"strconv"

	"github.com/makerfleet/makerfleet/task"
)

// The vote key and the state are worked out for every sample and every
// step (the coordinator's Next, the voter's Parse): they are written here
// by hand, the same bytes encoding/json writes (encode_test.go checks it
// against json.Marshal, fuzzed), without its reflection.

// Key returns the canonical vote key of an answer:
// {"move":[d,from,to],"next_state":[[...],[...],[...]]}.
func (a Answer) Key() string {
	b := make([]byte, 0, 40+8*pegsLen(a.NextState))
	b = append(b, `{"move":`...)
	b = appendMove(b, a.Move)
	b = append(b, `,"next_state":`...)
	b = appendPegs(b, a.NextState)
	return string(append(b, '}'))
}

// EncodeState returns the canonical JSON of a state.
func EncodeState(st State) task.State { return encodeState(st) }

func encodeState(st State) task.State {
	b := make([]byte, 0, 32+8*pegsLen(st.Pegs))
	b = append(b, `{"pegs":`...)
	b = appendPegs(b, st.Pegs)
	if st.Prev != nil {
		b = append(b, `,"prev":`...)
		b = appendMove(b, *st.Prev)
	}
	return append(b, '}')
}

func pegsLen(p Pegs) int { return len(p[0]) + len(p[1]) + len(p[2]) }

// appendMove appends m as a JSON array.
func appendMove(b []byte, m Move) []byte {
	b = append(b, '[')
	for i, v := range m {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(v), 10)
	}
	return append(b, ']')
}

// appendPegs appends p as a JSON array of three arrays (a nil peg as []).
func appendPegs(b []byte, p Pegs) []byte {
	b = append(b, '[')
	for i, peg := range p {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for j, d := range peg {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, ']')
	}
	return append(b, ']')
}
