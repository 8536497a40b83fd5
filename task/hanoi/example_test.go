package hanoi_test

import (
	"fmt"

	"github.com/makerfleet/makerfleet/task/hanoi"
)

// A reply may think aloud; the last move and next_state are the answer, and
// the vote key is their canonical pair.
func ExampleInstance_Parse() {
	in, err := hanoi.New(3)
	if err != nil {
		panic(err)
	}
	reply := `Disk 1 has not moved yet. I first thought move = [1, 0, 1],
but with 3 disks the cycle is 0 -> 2 -> 1 -> 0.
move = [1, 0, 2]
next_state = [[3, 2], [], [1]]`
	v, err := in.Parse(in.Initial(), reply)
	if err != nil {
		panic(err)
	}
	fmt.Println(v.Key)

	_, err = in.Parse(in.Initial(), "move = [1, 0, 2]\nnext_state = [[3, 2], [1]]")
	fmt.Println(err)
	// Output:
	// {"move":[1,0,2],"next_state":[[3,2],[],[1]]}
	// task: malformed answer: next_state has 2 pegs, want 3
}
