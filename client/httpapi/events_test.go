package httpapi

import (
	"errors"
	"io"
	"strings"
	"testing"
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
