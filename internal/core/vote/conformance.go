package vote

// The conformance table: sequences of operations on one job's tally, with
// what each must give. Tally passes it in this package's tests and the
// Redis scripts pass it in internal/store's, on a real redis-server; both
// must also give exactly the same counters, decisions and tallies as each
// other at every operation.

// Op is one operation on a tally: exactly one of Open, Record and Close.
type Op struct {
	// Open opens the step and epoch of Open[0], Open[1].
	Open *[2]int64
	// Record records the sample with margin K.
	Record *Sample
	K      int
	// Close closes the step and epoch of Close[0], Close[1] without a decision.
	Close *[2]int64

	// Want is the outcome a Record gives, WantWinner the winner of its
	// decision ("" when it decides nothing), WantErr the error an
	// operation gives (nil for none).
	Want       Outcome
	WantWinner string
	WantErr    error
}

// Case is a named sequence of operations on a fresh tally.
type Case struct {
	Name string
	Ops  []Op
}

func open(step, epoch int64) Op { return Op{Open: &[2]int64{step, epoch}} }

func openErr(step, epoch int64, err error) Op {
	return Op{Open: &[2]int64{step, epoch}, WantErr: err}
}

func closeStep(step, epoch int64, err error) Op {
	return Op{Close: &[2]int64{step, epoch}, WantErr: err}
}

// v records a valid vote for key at index i of step/epoch.
func v(step, epoch int64, i int, key string, k int, want Outcome, winner string) Op {
	return Op{Record: &Sample{Step: step, Epoch: epoch, Index: i, VoteKey: key}, K: k, Want: want, WantWinner: winner}
}

// after records a valid vote guarded by the winner of the step before
// (Sample.AfterWinner).
func after(step, epoch int64, i int, key, parent string, k int, want Outcome, winner string) Op {
	return Op{Record: &Sample{Step: step, Epoch: epoch, Index: i, VoteKey: key, AfterWinner: parent}, K: k, Want: want, WantWinner: winner}
}

// rf records a red-flagged sample.
func rf(step, epoch int64, i int, reason string, k int, want Outcome) Op {
	return Op{Record: &Sample{Step: step, Epoch: epoch, Index: i, RedFlag: reason}, K: k, Want: want}
}

// Cases returns the conformance table (a fresh copy: callers may keep it).
func Cases() []Case {
	return []Case{
		{"k=1 first vote decides", []Op{
			open(0, 1), v(0, 1, 0, "a", 1, Decided, "a"),
			v(0, 1, 1, "b", 1, Replayed, "a"),
		}},
		{"unanimous k=3", []Op{
			open(0, 1), v(0, 1, 0, "a", 3, Recorded, ""), v(0, 1, 1, "a", 3, Recorded, ""), v(0, 1, 2, "a", 3, Decided, "a"),
		}},
		{"ahead by k, not first to k votes", []Op{
			open(4, 2),
			v(4, 2, 0, "a", 2, Recorded, ""), v(4, 2, 1, "b", 2, Recorded, ""), v(4, 2, 2, "a", 2, Recorded, ""),
			v(4, 2, 3, "b", 2, Recorded, ""), v(4, 2, 4, "b", 2, Recorded, ""), v(4, 2, 5, "b", 2, Decided, "b"),
		}},
		{"red flags count but do not vote", []Op{
			open(0, 1), rf(0, 1, 0, "too_long", 2, Recorded), v(0, 1, 1, "a", 2, Recorded, ""),
			rf(0, 1, 2, "parse", 2, Recorded), v(0, 1, 3, "a", 2, Decided, "a"),
		}},
		{"only red flags never decide", []Op{
			open(0, 1), rf(0, 1, 0, "parse", 1, Recorded), rf(0, 1, 1, "parse", 1, Recorded), rf(0, 1, 2, "refused", 1, Recorded),
		}},
		{"counted in index order whatever the arrival", []Op{
			open(0, 1), v(0, 1, 2, "a", 2, Recorded, ""), v(0, 1, 1, "a", 2, Recorded, ""),
			// index 0 arrives last: counted b, a, a: a leads by 1 only
			v(0, 1, 0, "b", 2, Recorded, ""), v(0, 1, 3, "a", 2, Decided, "a"),
		}},
		{"an early index decides the moment the gap fills", []Op{
			open(0, 1), v(0, 1, 1, "a", 2, Recorded, ""), v(0, 1, 0, "a", 2, Decided, "a"),
		}},
		{"samples beyond the decision do not count", []Op{
			open(0, 1), v(0, 1, 3, "b", 2, Recorded, ""), v(0, 1, 2, "b", 2, Recorded, ""),
			v(0, 1, 1, "a", 2, Recorded, ""), v(0, 1, 0, "a", 2, Decided, "a"),
		}},
		{"a duplicate index is ignored", []Op{
			open(0, 1), v(0, 1, 0, "a", 2, Recorded, ""), v(0, 1, 0, "a", 2, Duplicate, ""),
			v(0, 1, 0, "b", 2, Duplicate, ""), rf(0, 1, 0, "parse", 2, Duplicate), v(0, 1, 1, "a", 2, Decided, "a"),
		}},
		{"ties lead by nothing", []Op{
			open(0, 1), v(0, 1, 0, "a", 1, Decided, "a"),
			v(1, 1, 0, "a", 2, Recorded, ""), v(1, 1, 1, "b", 2, Recorded, ""), v(1, 1, 2, "c", 2, Recorded, ""),
			v(1, 1, 3, "c", 2, Recorded, ""), v(1, 1, 4, "c", 2, Decided, "c"),
		}},
		{"many candidates, large k", []Op{
			open(0, 1),
			v(0, 1, 0, "a", 5, Recorded, ""), v(0, 1, 1, "b", 5, Recorded, ""), v(0, 1, 2, "c", 5, Recorded, ""),
			v(0, 1, 3, "d", 5, Recorded, ""), v(0, 1, 4, "a", 5, Recorded, ""), v(0, 1, 5, "a", 5, Recorded, ""),
			v(0, 1, 6, "a", 5, Recorded, ""), v(0, 1, 7, "a", 5, Recorded, ""), v(0, 1, 8, "a", 5, Decided, "a"),
		}},
		{"the next step opens decided and fresh", []Op{
			open(7, 3), v(7, 3, 0, "x", 1, Decided, "x"),
			v(8, 3, 0, "y", 2, Recorded, ""), v(8, 3, 1, "y", 2, Decided, "y"),
			v(9, 3, 0, "z", 1, Decided, "z"),
		}},
		{"a retried record of the decided step replays", []Op{
			open(0, 1), v(0, 1, 0, "a", 2, Recorded, ""), v(0, 1, 1, "a", 2, Decided, "a"),
			v(0, 1, 1, "a", 2, Replayed, "a"), v(0, 1, 5, "b", 2, Replayed, "a"), rf(0, 1, 2, "parse", 2, Replayed),
		}},
		{"stale step and epoch", []Op{
			open(3, 2), v(2, 2, 0, "a", 1, Stale, ""), v(4, 2, 0, "a", 1, Stale, ""), v(3, 1, 0, "a", 1, Stale, ""),
			v(3, 3, 0, "a", 1, Stale, ""), v(3, 2, 0, "a", 2, Recorded, ""),
		}},
		{"no open step", []Op{
			{Record: &Sample{Step: 0, Epoch: 1, Index: 0, VoteKey: "a"}, K: 1, WantErr: ErrNoStep},
			closeStep(0, 1, ErrNoStep),
		}},
		{"reopening the open step changes nothing", []Op{
			open(0, 1), v(0, 1, 0, "a", 2, Recorded, ""), open(0, 1), v(0, 1, 1, "a", 2, Decided, "a"),
		}},
		{"older epochs and steps cannot open", []Op{
			open(5, 4), v(5, 4, 0, "a", 3, Recorded, ""),
			openErr(5, 3, ErrStaleOpen), openErr(4, 4, ErrStaleOpen), openErr(9, 3, ErrStaleOpen),
			v(5, 4, 1, "a", 3, Recorded, ""),
		}},
		{"a new owner's epoch opens any step fresh", []Op{
			open(5, 4), v(5, 4, 0, "a", 2, Recorded, ""), open(2, 5),
			v(5, 4, 1, "a", 2, Stale, ""), v(2, 5, 0, "b", 2, Recorded, ""), v(2, 5, 1, "b", 2, Decided, "b"),
		}},
		{"a later step of the epoch opens", []Op{
			open(1, 1), v(1, 1, 0, "a", 2, Recorded, ""), open(3, 1), v(1, 1, 1, "a", 2, Stale, ""),
			v(3, 1, 0, "c", 1, Decided, "c"),
		}},
		{"closed without a decision", []Op{
			open(0, 1), v(0, 1, 0, "a", 3, Recorded, ""), v(0, 1, 1, "b", 3, Recorded, ""),
			closeStep(0, 1, nil), closeStep(0, 1, nil),
			v(0, 1, 2, "a", 3, Stale, ""), closeStep(1, 1, ErrNoStep), closeStep(0, 2, ErrNoStep),
			open(1, 1), v(1, 1, 0, "a", 1, Decided, "a"),
		}},
		{"the decision survives a new owner's open", []Op{
			open(0, 1), v(0, 1, 0, "a", 1, Decided, "a"), open(1, 2),
			v(0, 1, 3, "a", 1, Replayed, "a"), v(1, 1, 0, "a", 1, Stale, ""),
		}},
		{"a guarded sample waits for the decision it names", []Op{
			open(0, 1), v(0, 1, 0, "a", 2, Recorded, ""),
			after(1, 1, 0, "x", "a", 2, NotYet, ""), // step 0 is not decided yet
			v(0, 1, 1, "a", 2, Decided, "a"),
			after(1, 1, 0, "x", "a", 2, Recorded, ""), after(1, 1, 1, "x", "a", 2, Decided, "x"),
			after(2, 1, 0, "y", "z", 1, NotYet, ""), // step 1's winner is x, not z
			after(2, 1, 0, "y", "x", 1, Decided, "y"),
		}},
		{"a guard names the step just before, in the open epoch", []Op{
			open(0, 1), v(0, 1, 0, "a", 1, Decided, "a"),
			after(2, 1, 0, "x", "a", 1, NotYet, ""),             // not step 1
			after(1, 2, 0, "x", "a", 1, NotYet, ""),             // not epoch 1
			open(1, 2), after(1, 2, 0, "x", "a", 1, NotYet, ""), // a new owner's epoch: step 0 was decided under 1
			v(1, 2, 0, "x", 2, Recorded, ""),
			after(1, 2, 0, "x", "a", 2, NotYet, ""), // a guard is checked before anything else
		}},
		{"a guard that holds counts like any sample", []Op{
			open(0, 1), v(0, 1, 0, "a", 1, Decided, "a"),
			after(1, 1, 0, "x", "a", 2, Recorded, ""), after(1, 1, 0, "y", "a", 2, Duplicate, ""),
			v(1, 1, 1, "x", 2, Decided, "x"),
		}},
		{"vote keys are opaque bytes", []Op{
			open(0, 1), v(0, 1, 0, `{"move":[1,2]}`, 2, Recorded, ""), v(0, 1, 1, "r", 2, Recorded, ""),
			v(0, 1, 2, `{"move":[1,2]}`, 2, Recorded, ""), v(0, 1, 3, `{"move":[1,2]}`, 2, Decided, `{"move":[1,2]}`),
		}},
	}
}
