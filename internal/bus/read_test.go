package bus_test

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// readAll collects what ReadOrdered passes its callback.
func readAll(t *testing.T, js jetstream.JetStream, r bus.ReadRange) ([]uint64, []string, error) {
	t.Helper()
	var seqs []uint64
	var data []string
	err := bus.ReadOrdered(opCtx(t), js, r, func(seq uint64, d []byte) error {
		seqs = append(seqs, seq)
		data = append(data, string(d))
		return nil
	})
	return seqs, data, err
}

// clientGoroutines counts the goroutines running nats.go's JetStream
// client code: a fetch that outlived its read would be one.
func clientGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "nats.go/jetstream.") {
			count++
		}
	}
	return count
}

// TestReadOrdered: a range of one subject comes in order and nothing
// outside it; reading to the end takes every message pending; ErrStopRead
// ends a read early without an error and a callback's error is returned;
// a filter that matches nothing ends at once; a range whose end never
// arrives fails with ErrReadStalled. Not parallel: when each read returns,
// none of its goroutines may be left running.
func TestReadOrdered(t *testing.T) {
	js := jetStream(t)
	ctx := opCtx(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r.*"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	// Interleaved: a0 b0 a1 b1 ... (a_i at sequence 2i+1).
	const n = 300 // more than one fetch's batch of a's
	for i := range n {
		for _, s := range []string{"a", "b"} {
			if _, err := js.Publish(ctx, "r."+s, []byte(s+strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := clientGoroutines()
	t.Cleanup(func() {
		for deadline := time.Now().Add(2 * time.Second); clientGoroutines() > base; {
			if time.Now().After(deadline) {
				t.Errorf("%d JetStream client goroutines left running after the reads, %d before", clientGoroutines(), base)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	seqs, data, err := readAll(t, js, bus.ReadRange{Stream: "R", Subjects: []string{"r.a"}, From: 2*3 + 1, To: 2*270 + 1})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 3; i <= 270; i++ {
		want = append(want, "a"+strconv.Itoa(i))
	}
	if !slices.Equal(data, want) || !slices.IsSorted(seqs) || seqs[0] != 7 || seqs[len(seqs)-1] != 541 {
		t.Errorf("range a3..a270: got %d messages %v.. at %v..", len(data), data[:min(3, len(data))], seqs[:min(3, len(seqs))])
	}

	if _, data, err := readAll(t, js, bus.ReadRange{Stream: "R", Subjects: []string{"r.b"}}); err != nil || len(data) != n || data[0] != "b0" || data[n-1] != fmt.Sprintf("b%d", n-1) {
		t.Errorf("all of r.b: %d messages (%v), want %d from b0", len(data), err, n)
	}

	var got []string
	err = bus.ReadOrdered(ctx, js, bus.ReadRange{Stream: "R"}, func(_ uint64, d []byte) error {
		got = append(got, string(d))
		if len(got) == 3 {
			return bus.ErrStopRead
		}
		return nil
	})
	if err != nil || !slices.Equal(got, []string{"a0", "b0", "a1"}) {
		t.Errorf("stopped after 3: %v, %v", got, err)
	}
	boom := errors.New("boom")
	if err := bus.ReadOrdered(ctx, js, bus.ReadRange{Stream: "R"}, func(uint64, []byte) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("callback error: ReadOrdered = %v, want %v", err, boom)
	}

	start := time.Now()
	if seqs, _, err := readAll(t, js, bus.ReadRange{Stream: "R", Subjects: []string{"r.c"}}); err != nil || len(seqs) != 0 {
		t.Errorf("empty filter: %v, %v", seqs, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("an empty read took %s: it should see at once that nothing is pending", d)
	}
	if _, data, err := readAll(t, js, bus.ReadRange{Stream: "R", Subjects: []string{"r.a"}, From: 2*n - 1, To: 2*n + 100}); !errors.Is(err, bus.ErrReadStalled) || len(data) != 1 {
		t.Errorf("a range past the end: %d messages, %v; want the last a, then ErrReadStalled", len(data), err)
	}
}
