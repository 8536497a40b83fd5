package service_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/internal/service"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder notes what services did, in order.
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// part is a service that notes its start and stop and runs until stopped.
func part(r *recorder, name string) service.Service {
	return service.Func(name, func(ctx context.Context) error {
		r.note("start " + name)
		<-ctx.Done()
		r.note("stop " + name)
		return nil
	})
}

// TestRunOrder: services start in order, each once the one before is
// ready, and stop in reverse order once ctx ends; Run returns nil.
func TestRunOrder(t *testing.T) {
	t.Parallel()
	var r recorder
	ctx, cancel := context.WithCancel(context.Background())
	allUp := make(chan struct{})
	slow := service.Ready("slow", func(ctx context.Context, ready func()) error {
		r.note("start slow")
		r.note("slow ready") // nothing after it may start before this
		ready()
		<-ctx.Done()
		r.note("stop slow")
		return nil
	})
	last := service.Func("last", func(ctx context.Context) error {
		r.note("start last")
		close(allUp)
		<-ctx.Done()
		r.note("stop last")
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, part(&r, "a"), slow, last) }()
	<-allUp
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []string{"start a", "start slow", "slow ready", "start last", "stop last", "stop slow", "stop a"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestRunEnds: a service that fails, or returns while it still should
// run, stops the others (in reverse order) and Run returns why, named;
// services after one that fails to start never start.
func TestRunEnds(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tt := range []struct {
		name    string
		failing func(up <-chan struct{}) service.Service
		want    error
		wantLog []string
	}{
		{"fails while running", func(up <-chan struct{}) service.Service {
			return service.Func("b", func(ctx context.Context) error { <-up; return boom })
		}, boom, []string{"start a", "start c", "stop c", "stop a"}},
		{"returns nil on its own", func(up <-chan struct{}) service.Service {
			return service.Func("b", func(ctx context.Context) error { <-up; return nil })
		}, service.ErrStopped, []string{"start a", "start c", "stop c", "stop a"}},
		{"fails before it is ready", func(<-chan struct{}) service.Service {
			return service.Ready("b", func(ctx context.Context, ready func()) error { return boom })
		}, boom, []string{"start a", "stop a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r recorder
			up := make(chan struct{})
			c := service.Func("c", func(ctx context.Context) error {
				r.note("start c")
				close(up)
				<-ctx.Done()
				r.note("stop c")
				return nil
			})
			err := service.Run(context.Background(), part(&r, "a"), tt.failing(up), c)
			if !errors.Is(err, tt.want) || err.Error()[:3] != "b: " {
				t.Errorf("Run: %v, want b: %v", err, tt.want)
			}
			if got := r.got(); !slices.Equal(got, tt.wantLog) {
				t.Errorf("got %q, want %q", got, tt.wantLog)
			}
		})
	}
}

// TestRunCancelledWhileStarting: a Run whose ctx ends while a service gets
// ready stops what started and starts nothing more.
func TestRunCancelledWhileStarting(t *testing.T) {
	t.Parallel()
	var r recorder
	ctx, cancel := context.WithCancel(context.Background())
	never := service.Ready("never-ready", func(sctx context.Context, ready func()) error {
		r.note("start never-ready")
		cancel() // the process is told to stop before this is ready
		<-sctx.Done()
		r.note("stop never-ready")
		return sctx.Err() // a cancelled service may say so
	})
	if err := service.Run(ctx, part(&r, "a"), never, part(&r, "z")); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []string{"start a", "start never-ready", "stop never-ready", "stop a"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestGroupStopsTogether: a group's services stop together: here each
// waits, once stopped, until the other has been stopped too, which
// stopping them one by one would never allow.
func TestGroupStopsTogether(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	up := make(chan struct{}, 2)
	member := func(i int) service.Service {
		return service.Func("m", func(ctx context.Context) error {
			up <- struct{}{}
			<-ctx.Done()
			close(stopped[i])
			select {
			case <-stopped[1-i]:
				return nil
			case <-time.After(time.Minute): // a deadlock's bound, not a timing check
				return errors.New("the other member was not stopped")
			}
		})
	}
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, service.Group("work", member(0), member(1))) }()
	<-up
	<-up
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestGroupFails: a member that fails stops the group's others, and the
// error names the group and the member.
func TestGroupFails(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var r recorder
	up := make(chan struct{})
	failing := service.Func("bad", func(ctx context.Context) error { <-up; return boom })
	other := service.Func("other", func(ctx context.Context) error {
		close(up)
		<-ctx.Done()
		r.note("other stopped")
		return nil
	})
	err := service.Run(context.Background(), service.Group("work", failing, other))
	if !errors.Is(err, boom) || err.Error() != "work: bad: boom" {
		t.Errorf("Run: %v, want work: bad: boom", err)
	}
	if got := r.got(); !slices.Equal(got, []string{"other stopped"}) {
		t.Errorf("got %q", got)
	}
}

// TestStarted: a Started service is ready once start returns and is
// stopped by its stop after the services started after it; a start that
// fails is the Run's error.
func TestStarted(t *testing.T) {
	t.Parallel()
	var r recorder
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan struct{})
	bg := service.Started("bg", func(context.Context) (func(), error) {
		r.note("start bg")
		return func() { r.note("stop bg") }, nil
	})
	after := service.Func("after", func(ctx context.Context) error {
		close(up)
		<-ctx.Done()
		r.note("stop after")
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, bg, after) }()
	<-up
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := r.got(), []string{"start bg", "stop after", "stop bg"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	boom := errors.New("boom")
	failing := service.Started("sub", func(context.Context) (func(), error) { return nil, boom })
	if err := service.Run(context.Background(), failing); !errors.Is(err, boom) {
		t.Errorf("a failed start: %v, want boom", err)
	}
}

// TestRunCause: the error Run returns is the one that ended the run, not
// one a service started earlier returns as it is stopped.
func TestRunCause(t *testing.T) {
	t.Parallel()
	cause, later := errors.New("cause"), errors.New("stopping failed")
	first := service.Func("first", func(ctx context.Context) error { <-ctx.Done(); return later })
	second := service.Func("second", func(ctx context.Context) error { return cause })
	err := service.Run(context.Background(), first, second)
	if !errors.Is(err, cause) || errors.Is(err, later) {
		t.Errorf("Run: %v, want second: cause", err)
	}
}
