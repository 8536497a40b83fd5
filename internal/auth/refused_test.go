package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// action is something a client does; it returns when done, or when ctx
// ends (a refused request gets no answer).
type action func(ctx context.Context, c *authtest.Conn) error

func publish(subject string) action {
	return func(_ context.Context, c *authtest.Conn) error {
		if err := c.Publish(subject, []byte(`{}`)); err != nil {
			return err
		}
		return c.Flush()
	}
}

func jsPublish(subject string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		js, err := jetstream.New(c.Conn)
		if err != nil {
			return err
		}
		_, err = js.Publish(ctx, subject, []byte(`{}`))
		return err
	}
}

func subscribe(subject string) action {
	return func(_ context.Context, c *authtest.Conn) error {
		if _, err := c.SubscribeSync(subject); err != nil {
			return err
		}
		return c.Flush()
	}
}

func request(subject string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		_, err := c.RequestWithContext(ctx, subject, nil)
		if errors.Is(err, nats.ErrNoResponders) {
			return nil // allowed: nobody serves it in this test
		}
		return err
	}
}

func bucket(ctx context.Context, c *authtest.Conn, name string) (jetstream.KeyValue, error) {
	js, err := jetstream.New(c.Conn)
	if err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, name)
}

func kvGet(name, key string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		kv, err := bucket(ctx, c, name)
		if err != nil {
			return err
		}
		if _, err = kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		return err
	}
}

func kvPut(name, key string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		kv, err := bucket(ctx, c, name)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, key, []byte(`{}`))
		return err
	}
}

func kvWatch(name, keys string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		kv, err := bucket(ctx, c, name)
		if err != nil {
			return err
		}
		w, err := kv.Watch(ctx, keys)
		if err != nil {
			return err
		}
		defer func() { _ = w.Stop() }()
		select { // the initial values end with a nil entry
		case <-w.Updates():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func deadLetters(tenant string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		js, err := jetstream.New(c.Conn)
		if err != nil {
			return err
		}
		_, err = bus.ListDeadLetters(ctx, js, bus.DefaultNamespace, tenant, "", 10)
		return err
	}
}

// jobList lists tenant's jobs as `maker jobs list --tenant T` does: a KV
// key listing filtered on the tenant's keys.
func jobList(tenant string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		js, err := jetstream.New(c.Conn)
		if err != nil {
			return err
		}
		topo, err := topology.Open(ctx, js, topology.Config{})
		if err != nil {
			return err
		}
		_, err = jobs.List(ctx, topo, tenant)
		return err
	}
}

// TestAuthRefused: each forbidden action of each identity is refused by
// the nats-server running with the auth.conf `maker auth init` wrote, and
// the allowed ones (the controls) pass.
func TestAuthRefused(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	ns := bus.DefaultNamespace
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The coordinator makes the fleet's topology, the judge its own: both
	// on their identities.
	for _, id := range []string{auth.Coordinator, auth.Judge} {
		c := srv.Connect(t, id)
		js, err := jetstream.New(c.Conn)
		if err != nil {
			t.Fatal(err)
		}
		if id == auth.Coordinator {
			_, err = topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage})
		} else {
			_, err = topology.EnsureJudge(ctx, js, topology.JudgeConfig{Storage: jetstream.MemoryStorage})
		}
		if err != nil {
			t.Fatalf("%s makes its topology: %v (violations %v)", id, err, c.Violations())
		}
		for _, v := range c.Violations() {
			t.Errorf("%s was refused: %v", id, v)
		}
	}
	// The api (maker serve) is the only door tenants have: what it may do
	// for them, and nothing more.
	api := auth.API
	result := ns.ResultSubject("alpha", "j1", 0)
	cases := []refusal{
		// Finding 1: only voters publish results.
		{"api publishes a result", api, publish(result), result},
		{"coordinator publishes a result", auth.Coordinator, publish(result), result},
		{"approver publishes a result", auth.Approver, publish(result), result},
		{"judge publishes a result", auth.Judge, publish(result), result},
		{"voter publishes a result", auth.Voter, jsPublish(result), ""},
		// Finding 2: only coordinators announce decided steps.
		{"api publishes step decided", api, publish(ns.DecidedSubject("alpha", "j1")), ns.DecidedSubject("alpha", "j1")},
		{"voter publishes step decided", auth.Voter, publish(ns.DecidedSubject("alpha", "j1")), ns.DecidedSubject("alpha", "j1")},
		{"judge publishes step decided", auth.Judge, publish(ns.DecidedSubject("alpha", "j1")), ns.DecidedSubject("alpha", "j1")},
		{"voter hears step decided", auth.Voter, subscribe(ns.DecidedWildcard()), ""},
		// Finding 3: only coordinators issue sample requests.
		{"api issues a sample request", api, publish(ns.SampleSubject("alpha", "j1")), ns.SampleSubject("alpha", "j1")},
		{"voter issues a sample request", auth.Voter, publish(ns.SampleSubject("alpha", "j1")), ns.SampleSubject("alpha", "j1")},
		{"voter listens to sample requests", auth.Voter, subscribe(ns.SampleSubject("*", "*")), ns.SampleSubject("*", "*")},
		// Dead-letter replays are asked by maker serve (an admin key's) and
		// answered by coordinators only.
		{"voter asks a dead-letter replay", auth.Voter, publish(ns.DLQReplaySubject()), ns.DLQReplaySubject()},
		{"api answers dead-letter replays", api, subscribe(ns.DLQReplaySubject()), ns.DLQReplaySubject()},
		{"api pulls the voters' requests", api, request("$JS.API.CONSUMER.MSG.NEXT.MAKER_SAMPLES.voters"), "$JS.API.CONSUMER.MSG.NEXT.MAKER_SAMPLES.voters"},
		{"voter creates a consumer", auth.Voter, request("$JS.API.CONSUMER.CREATE.MAKER_SAMPLES.x"), "$JS.API.CONSUMER.CREATE.MAKER_SAMPLES.x"},
		// Finding 4: jobs, controls and decisions.
		{"voter submits a job", auth.Voter, publish(ns.JobSubject("alpha")), ns.JobSubject("alpha")},
		{"api submits a tenant's job", api, jsPublish(ns.JobSubject("alpha")), ""},
		{"api controls a tenant's job", api, request("maker.v1.control.alpha.j1"), ""},
		{"voter controls a job", auth.Voter, publish("maker.v1.control.alpha.j1"), "maker.v1.control.alpha.j1"},
		{"voter decides a step", auth.Voter, publish("maker.v1.decide.alpha.j1"), "maker.v1.decide.alpha.j1"},
		{"approver decides a step", auth.Approver, request("maker.v1.decide.alpha.j1"), ""},
		{"api asks an approver's decision", api, request("maker.v1.decide.alpha.j1"), ""},
		{"api approves a held judge call", api, publish("maker.v1.judge_approve.approver"), "maker.v1.judge_approve.approver"},
		{"approver approves as another", auth.Approver, publish("maker.v1.judge_approve.admin"), "maker.v1.judge_approve.admin"},
		{"approver approves", auth.Approver, publish("maker.v1.judge_approve.approver"), ""},
		{"api asks break glass for a tenant", api, jsPublish(ns.JudgeSubject("alpha")), ""},
		{"coordinator asks break glass", auth.Coordinator, publish(ns.JudgeSubject("alpha")), ns.JudgeSubject("alpha")},
		{"voter asks break glass", auth.Voter, publish(ns.JudgeSubject("alpha")), ns.JudgeSubject("alpha")},
		{"api reads a status", api, kvGet(ns.StatusBucket(), "alpha.j1"), ""},
		{"api reads a judge answer", api, kvGet(ns.JudgeAnswersBucket(), "alpha.r1"), ""},
		{"api reads the leases", api, kvGet(ns.LeasesBucket(), "alpha.j1"), "$JS.API.DIRECT.GET.KV_maker_leases"},
		{"api reads a judge session", api, kvGet(ns.JudgeSessionsBucket(), "alpha.s1"), "$JS.API.DIRECT.GET.KV_maker_judge_sessions"},
		{"api watches the jobs", api, kvWatch(ns.StatusBucket(), "alpha.>"), ""},
		{"api lists a tenant's dead letters", api, deadLetters("alpha"), ""},
		{"voter lists dead letters", auth.Voter, deadLetters("alpha"), "$JS.API.CONSUMER.CREATE.MAKER_DLQ."},
		{"api reads the judge audit", api, request("$JS.API.CONSUMER.CREATE.MAKER_JUDGE_AUDIT.x"), "$JS.API.CONSUMER.CREATE.MAKER_JUDGE_AUDIT.x"},
		{"api listens to everything", api, subscribe(">"), ">"},
		{"api listens to every inbox", api, subscribe("_INBOX.>"), "_INBOX.>"},
		{"api listens to the coordinator's inbox", api, subscribe("_INBOX.coordinator.>"), "_INBOX.coordinator.>"},
		{"api listens to its inbox", api, subscribe("_INBOX.api.>"), ""},
		{"api listens to controls", api, subscribe("maker.v1.control.>"), "maker.v1.control.>"},
		// KV writes and stream administration.
		{"api writes a status", api, kvPut(ns.StatusBucket(), "alpha.j1"), "$KV.maker_status.alpha.j1"},
		{"voter writes the registry", auth.Voter, kvPut(ns.JobsBucket(), "alpha.j1"), "$KV.maker_jobs.alpha.j1"},
		{"voter writes a task spec", auth.Voter, kvPut(ns.TasksBucket(), "t.1"), "$KV.maker_tasks.t.1"},
		{"voter writes an API key", auth.Voter, kvPut(ns.APIKeysBucket(), "k"), "$KV.maker_apikeys.k"},
		{"voter reads a task spec", auth.Voter, kvGet(ns.TasksBucket(), "t.1"), ""},
		{"coordinator writes a task spec", auth.Coordinator, kvPut(ns.TasksBucket(), "t.1"), "$KV.maker_tasks.t.1"},
		{"admin writes a task spec", auth.Admin, kvPut(ns.TasksBucket(), "t.1"), ""},
		{"api resets a judge session", api, kvPut(ns.JudgeSessionsBucket(), "alpha.s1"), "$KV.maker_judge_sessions.alpha.s1"},
		{"coordinator writes a judge session", auth.Coordinator, kvPut(ns.JudgeSessionsBucket(), "alpha.s1"), "$KV.maker_judge_sessions.alpha.s1"},
		{"coordinator purges the judge sessions", auth.Coordinator, request("$JS.API.STREAM.PURGE.KV_maker_judge_sessions"), "$JS.API.STREAM.PURGE.KV_maker_judge_sessions"},
		{"judge writes a judge session", auth.Judge, kvPut(ns.JudgeSessionsBucket(), "alpha.s1"), ""},
		{"api deletes a stream", api, request("$JS.API.STREAM.DELETE.MAKER_JOBS"), "$JS.API.STREAM.DELETE.MAKER_JOBS"},
		{"voter purges the results", auth.Voter, request("$JS.API.STREAM.PURGE.MAKER_RESULTS"), "$JS.API.STREAM.PURGE.MAKER_RESULTS"},
		{"judge deletes a fleet stream", auth.Judge, request("$JS.API.STREAM.DELETE.MAKER_JOBS"), "$JS.API.STREAM.DELETE.MAKER_JOBS"},
		{"judge changes its stream's config", auth.Judge, request("$JS.API.STREAM.UPDATE.MAKER_JUDGE"), "$JS.API.STREAM.UPDATE.MAKER_JUDGE"},
		{"judge purges its audit trail", auth.Judge, request("$JS.API.STREAM.PURGE.MAKER_JUDGE_AUDIT"), "$JS.API.STREAM.PURGE.MAKER_JUDGE_AUDIT"},
		{"judge reads its requests", auth.Judge, request("$JS.API.CONSUMER.INFO.MAKER_JUDGE.judges"), ""},
		{"judge re-publishes an approved break-glass call", auth.Judge, jsPublish(ns.JudgeSubject("alpha")), ""},
		{"judge re-publishes an approved arbitration", auth.Judge, jsPublish(ns.ArbitrateSubject("alpha")), ""},
		{"api lists a tenant's jobs", api, jobList("alpha"), ""},
		{"admin does anything", auth.Admin, request("$JS.API.STREAM.INFO.MAKER_JOBS"), ""},
		// Retention (internal/retention, maker jobs purge): the admin and
		// the coordinators' sweep purge; the api purges nothing, and no one
		// but the admin sets the policies.
		{"api purges the journal", api, request("$JS.API.STREAM.PURGE.MAKER_JOURNAL"), "$JS.API.STREAM.PURGE.MAKER_JOURNAL"},
		{"api purges the dead letters", api, request("$JS.API.STREAM.PURGE.MAKER_DLQ"), "$JS.API.STREAM.PURGE.MAKER_DLQ"},
		{"api writes a report", api, kvPut(ns.ReportsBucket(), "beta.j1"), "$KV.maker_reports.beta.j1"},
		{"api purges the reports bucket", api, request("$JS.API.STREAM.PURGE.KV_maker_reports"), "$JS.API.STREAM.PURGE.KV_maker_reports"},
		{"api sets a tenant's retention", api, publish("$KV." + ns.RetentionBucket() + ".alpha"), "$KV." + ns.RetentionBucket() + ".alpha"},
		{"coordinator sets the fleet's retention", auth.Coordinator, publish("$KV." + ns.RetentionBucket() + "._fleet"), "$KV." + ns.RetentionBucket() + "._fleet"},
		{"coordinator takes the sweep's lease", auth.Coordinator, publish("$KV." + ns.RetentionBucket() + ".sweep.lease"), ""},
		{"coordinator purges a job's journal", auth.Coordinator, request("$JS.API.STREAM.PURGE.MAKER_JOURNAL"), ""},
		{"admin sets the fleet's retention", auth.Admin, publish("$KV." + ns.RetentionBucket() + "._fleet"), ""},
		{"admin purges the dead letters", auth.Admin, request("$JS.API.STREAM.PURGE.MAKER_DLQ"), ""},
	}
	runRefusals(ctx, t, srv, cases)
}

// refusal is one action of one identity, and what the server must refuse
// of it.
type refusal struct {
	name     string
	identity string
	do       action
	// refused is the subject the server must refuse (a prefix of it for
	// generated names); "" means the action is allowed.
	refused string
}

// runRefusals runs each case on its own connection, in parallel, and
// checks the server refused what it must and nothing else.
func runRefusals(ctx context.Context, t *testing.T, srv *authtest.Server, cases []refusal) {
	t.Helper()
	// In a group, so ctx outlives the parallel cases.
	t.Run("cases", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				c := srv.Connect(t, tc.identity)
				actx, acancel := context.WithTimeout(ctx, 20*time.Second)
				defer acancel()
				done := make(chan error, 1)
				go func() { done <- tc.do(actx, c) }() // owned: awaited below
				if tc.refused == "" {
					if err := <-done; err != nil {
						t.Fatalf("%s: %v (violations %v)", tc.identity, err, c.Violations())
					}
					if err := c.Flush(); err != nil {
						t.Fatal(err)
					}
					for _, v := range c.Violations() {
						t.Errorf("%s was refused: %v", tc.identity, v)
					}
					return
				}
				v := c.WaitViolation(tc.refused, 15*time.Second)
				acancel()
				<-done
				if !errors.Is(v, bus.ErrPermission) {
					t.Fatalf("the server did not refuse %s %s (violations %v)", tc.identity, tc.refused, c.Violations())
				}
			})
		}
	})
}
