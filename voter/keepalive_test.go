package voter

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// progressMsg counts InProgress calls; every other method is unused here.
type progressMsg struct {
	jetstream.Msg
	n atomic.Int64
}

func (m *progressMsg) InProgress() error { m.n.Add(1); return nil }

// TestKeepAlive: during a long model call the request is reported in
// progress every interval, and not once more after the call ends.
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	m := &progressMsg{}
	stop := keepAliveEvery(m, 10*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for m.n.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d InProgress calls after 10s, want >= 3 at a 10ms interval", m.n.Load())
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	after := m.n.Load()
	time.Sleep(50 * time.Millisecond) // five intervals: any stray tick would show
	if got := m.n.Load(); got != after {
		t.Fatalf("%d InProgress calls after stop", got-after)
	}
	if stop := keepAliveEvery(m, 0); stop == nil {
		t.Fatal("a zero interval must still return a stop func")
	}
}
