package hanoi_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{
		answer("[1, 0, 2]", "[[3, 2], [], [1]]"),
		"move = [1, 0, 1]\nmove=[1,0,2]\nnext_state=[[3,2],[],[1]]",
		answer("[1.0, 0, 2]", "[[3, 2], [], [1]]"),
		answer("[1, 0, 2]", "[[3, 2], null, [1]]"),
		answer("[1, 0, 2]", "[[[3], 2], [], [1]]"),
		answer("[1, 0, 2]", "[[3, 2], [], [1]"),
		answer(`["]", 0, 2]`, `[[3, "]"], [], [1]]`),
		answer("[-0, 0, 2]", "[[3, 2], [], [-0]]"),
		"move = \nnext_state = ",
	} {
		f.Add(s, uint8(3))
	}
	f.Add(answer("[20, 0, 2]", "[[], [], [20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1]]"), uint8(20))
	f.Fuzz(func(t *testing.T, reply string, nb uint8) {
		n := 1 + int(nb)%hanoi.MaxDisks
		a, err := hanoi.ParseAnswer(reply, n)
		if err != nil {
			if !errors.Is(err, task.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		key := a.Key()
		b, err := hanoi.DecodeAnswer(key)
		if err != nil {
			t.Fatalf("DecodeAnswer(%s): %v", key, err)
		}
		if b.Key() != key {
			t.Fatalf("key %s decodes and re-encodes as %s", key, b.Key())
		}
		// Written back as a model would, the answer parses to the same vote.
		c, err := hanoi.ParseAnswer("move = "+hanoi.FormatMove(b.Move)+"\nnext_state = "+hanoi.FormatPegs(b.NextState), n)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", key, err)
		}
		if c.Key() != key {
			t.Fatalf("re-parse gives key %s, want %s", c.Key(), key)
		}
		// And the instance can step from it.
		in, err := hanoi.New(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := in.Next(in.Initial(), task.Vote{Key: key}); err != nil {
			t.Fatalf("Next(%s): %v", key, err)
		}
	})
}

func FuzzBind(f *testing.F) {
	for _, s := range []string{
		`{"disks":3}`, `{"disks":30}`, `{"disks":31}`, `{"disks":-1}`, `{"disks":"x"}`,
		`{"disks":3,"x":1}`, `{"disks":3} x`, `{"disks":3}}`, `null`, ``, `{"disks":1e1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		in, err := hanoi.Task{}.Bind(raw)
		if err != nil {
			if !errors.Is(err, task.ErrInvalidParams) {
				t.Fatalf("error %v does not wrap ErrInvalidParams", err)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("accepted invalid JSON %q", raw)
		}
		d := in.(*hanoi.Instance).Disks()
		if d < 1 || d > hanoi.MaxDisks {
			t.Fatalf("accepted %d disks from %q", d, raw)
		}
		again, err := hanoi.Task{}.Bind(in.Params())
		if err != nil || string(again.Params()) != string(in.Params()) {
			t.Fatalf("canonical params %s do not re-bind: %v", in.Params(), err)
		}
	})
}
