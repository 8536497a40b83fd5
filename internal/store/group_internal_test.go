package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// groupStore is a store on a real redis-server whose pipelines wait, once
// the first has started, until release is closed; queued is signalled
// for each call that queues behind it.
func groupStore(t *testing.T) (s *Store, started, release chan struct{}, queued chan struct{}) {
	t.Helper()
	r := testkit.StartRedis(t)
	s, err := New(r.Client(t), Config{})
	if err != nil {
		t.Fatal(err)
	}
	started, release, queued = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1000)
	var once sync.Once
	exec := s.records.exec
	s.records.exec = func(ctx context.Context, calls []*groupCall) {
		once.Do(func() {
			close(started)
			<-release
		})
		exec(ctx, calls)
	}
	s.records.waiting = func() { queued <- struct{}{} }
	return s, started, release, queued
}

// TestRecordManyGrouped: while one job's record is in flight, the records
// of many other jobs queue and go in the next pipeline, together; each
// job's outcome is exactly its own (its votes decide its step, in order).
func TestRecordManyGrouped(t *testing.T) {
	t.Parallel()
	s, started, release, queued := groupStore(t)
	ctx := t.Context()
	const jobs = 20
	for j := range jobs + 1 {
		if _, _, err := s.OpenStep(ctx, JobRef{Tenant: "t", JobID: fmt.Sprint("j", j)}, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	first := make(chan error, 1)
	go func() {
		_, err := s.RecordMany(ctx, JobRef{Tenant: "t", JobID: "j0"}, []vote.Sample{{Step: 0, Epoch: 1, Index: 0, VoteKey: "A"}}, 2)
		first <- err
	}()
	<-started
	type out struct {
		job int
		res []vote.RecordResult
		err error
	}
	outs := make(chan out, jobs)
	for j := 1; j <= jobs; j++ {
		go func() {
			// Job j votes A, B, A, A: decided A by 2 at index 3 (k 2).
			smps := []vote.Sample{{Step: 0, Epoch: 1, Index: 0, VoteKey: "A"}, {Step: 0, Epoch: 1, Index: 1, VoteKey: "B"},
				{Step: 0, Epoch: 1, Index: 2, VoteKey: "A"}, {Step: 0, Epoch: 1, Index: 3, VoteKey: "A"}}
			res, err := s.RecordMany(ctx, JobRef{Tenant: "t", JobID: fmt.Sprint("j", j)}, smps, 2)
			outs <- out{j, res, err}
		}()
	}
	for range jobs {
		<-queued
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range jobs {
		o := <-outs
		if o.err != nil {
			t.Fatalf("job %d: %v", o.job, o.err)
		}
		if len(o.res) != 4 || o.res[2].Outcome != vote.Recorded || o.res[3].Outcome != vote.Decided || o.res[3].Decision.Winner != "A" {
			t.Errorf("job %d: %+v", o.job, o.res)
		}
	}
	s.records.mu.Lock()
	defer s.records.mu.Unlock()
	if s.records.flushes != 2 {
		t.Errorf("%d pipelines for %d calls queued behind one: want 2 (the first, then the rest together)", s.records.flushes, jobs)
	}
}

// TestRecordManyGroupCancelled: a call whose ctx ends while it waits in the
// queue leaves it with the ctx's error, even the one chosen to lead the
// next pipeline, and the calls behind it are still sent.
func TestRecordManyGroupCancelled(t *testing.T) {
	t.Parallel()
	s, started, release, queued := groupStore(t)
	ctx := t.Context()
	for _, j := range []string{"lead", "gone", "next"} {
		if _, _, err := s.OpenStep(ctx, JobRef{Tenant: "t", JobID: j}, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	one := []vote.Sample{{Step: 0, Epoch: 1, Index: 0, VoteKey: "A"}}
	errs := make(chan error, 3)
	go func() { _, err := s.RecordMany(ctx, JobRef{Tenant: "t", JobID: "lead"}, one, 2); errs <- err }()
	<-started
	gctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() { _, err := s.RecordMany(gctx, JobRef{Tenant: "t", JobID: "gone"}, one, 2); gone <- err }()
	<-queued // "gone" is first in the queue: it would lead the next pipeline
	go func() { _, err := s.RecordMany(ctx, JobRef{Tenant: "t", JobID: "next"}, one, 2); errs <- err }()
	<-queued
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call: %v, want context.Canceled", err)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
