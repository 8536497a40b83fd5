package vote

import (
	"errors"
	"fmt"
)

// Check says how a result differs from what op wants ("" when it is
// what op wants): a store's conformance test and this package's own
// share it. res is nil for Open and Close.
func (op Op) Check(res *RecordResult, err error) string {
	if op.WantErr != nil || err != nil {
		if !errors.Is(err, op.WantErr) {
			return fmt.Sprintf("error %v, want %v", err, op.WantErr)
		}
		return ""
	}
	if res == nil {
		return ""
	}
	if res.Outcome != op.Want {
		return fmt.Sprintf("outcome %v, want %v", res.Outcome, op.Want)
	}
	switch {
	case (res.Outcome == Decided || res.Outcome == Replayed) != (res.Decision != nil):
		return fmt.Sprintf("outcome %v with decision %+v", res.Outcome, res.Decision)
	case res.Decision != nil && op.WantWinner != "" && res.Decision.Winner != op.WantWinner:
		return fmt.Sprintf("winner %q, want %q", res.Decision.Winner, op.WantWinner)
	case res.Outcome == Decided && res.Decision.Lead < op.K:
		return fmt.Sprintf("decided with lead %d below k=%d", res.Decision.Lead, op.K)
	}
	return ""
}

// Apply runs op on t, the reference every store is compared with.
func (op Op) Apply(t *Tally) (*RecordResult, error) {
	switch {
	case op.Open != nil:
		_, _, err := t.Open(op.Open[0], op.Open[1])
		return nil, err
	case op.Close != nil:
		_, _, err := t.Close(op.Close[0], op.Close[1])
		return nil, err
	}
	res, err := t.Record(*op.Record, op.K)
	if err != nil {
		return nil, err
	}
	return &res, nil
}
