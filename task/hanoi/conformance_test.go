package hanoi_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/task/tasktest"
)

// oracle answers a hanoi step as a perfect model would.
func oracle(inst task.Instance, s task.State) (string, error) {
	h := inst.(*hanoi.Instance)
	st, err := h.DecodeState(s)
	if err != nil {
		return "", err
	}
	m, err := hanoi.StrategyMove(st.Pegs, st.Prev, h.Disks())
	if err != nil {
		return "", err
	}
	next, err := hanoi.Apply(st.Pegs, m)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Following the strategy.\nmove = %s\nnext_state = %s", hanoi.FormatMove(m), hanoi.FormatPegs(next)), nil
}

func TestConformance(t *testing.T) {
	t.Parallel()
	var params []json.RawMessage
	for _, n := range []int{1, 2, 3, 4, 7, 8} {
		params = append(params, json.RawMessage(fmt.Sprintf(`{"disks":%d}`, n)))
	}
	tasktest.Run(t, tasktest.Config{
		Task:          hanoi.Task{},
		Params:        params,
		InvalidParams: []json.RawMessage{json.RawMessage(`{"disks":0}`), json.RawMessage(`{"disks":31}`), json.RawMessage(`{}`), json.RawMessage(`[]`), json.RawMessage(`nope`)},
		Oracle:        oracle,
		BadReplies:    []string{"move = [1, 0, 2]", "next_state = [[], [], [1]]"},
	})
}
