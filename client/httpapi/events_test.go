package httpapi

import (
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

func TestEventReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     []string // name=data
	}{
		{"one", "event: status\ndata: {}\n\n", []string{"status={}"}},
		{"comments and pings", ": ping\n\n: hi\nevent: a\ndata: 1\n\n", []string{"a=1"}},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"message=a\nb"}},
		{"crlf and cr", "event: x\r\ndata: 1\r\n\r\nevent: y\rdata: 2\r\r", []string{"x=1", "y=2"}},
		{"no space after colon", "event:x\ndata:1\n\n", []string{"x=1"}},
		{"unterminated last event dropped", "event: x\ndata: 1\n\nevent: y\ndata: 2", []string{"x=1"}},
		{"event without data skipped", "event: x\n\ndata: 2\n\n", []string{"message=2"}},
		{"other fields ignored", "id: 3\nretry: 10\ndata: 1\n\n", []string{"message=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newEventReader(strings.NewReader(tt.in))
			var got []string
			for {
				name, data, err := r.next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, name+"="+string(data))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzEventReader(f *testing.F) {
	f.Add("event: status\ndata: {}\n\n")
	f.Add("data: a\r\ndata: b\r\n\r\n: ping\n\n")
	f.Add("\r\r\n\n:")
	f.Fuzz(func(t *testing.T, in string) {
		r := newEventReader(strings.NewReader(in))
		for range len(in) + 1 {
			_, _, err := r.next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("error on %q: %v", in, err)
				}
				return
			}
		}
		t.Fatalf("more events than bytes in %q", in)
	})
}

// chunked reads its data n bytes at a time, as from a socket.
type chunked struct {
	data []byte
	n    int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[k:]
	return k, nil
}

// TestEventReaderLinear: reading an event costs time linear in its size
// (a 12 MiB event at most a few times 12 times a 1 MiB one's), also when
// it arrives in 16 KiB reads.
func TestEventReaderLinear(t *testing.T) {
	t.Parallel()
	read := func(size int) time.Duration {
		in := []byte("event: report\ndata: " + strings.Repeat("x", size) + "\n\n")
		best := time.Duration(math.MaxInt64)
		for range 3 {
			r := newEventReader(&chunked{data: in, n: 16 << 10})
			start := time.Now()
			name, data, err := r.next()
			d := time.Since(start)
			if err != nil || name != "report" || len(data) != size {
				t.Fatalf("read %q %d bytes: %v", name, len(data), err)
			}
			best = min(best, d)
		}
		return best
	}
	small, large := read(1<<20), read(12<<20)
	t.Logf("1 MiB: %v, 12 MiB: %v", small, large)
	if large > 36*small {
		t.Errorf("a 1 MiB event read in %v, a 12 MiB one in %v: more than linear", small, large)
	}
}
