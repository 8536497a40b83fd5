package tracing_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/tracing"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// wire records the headers and bodies of a job's sample requests and
// results (core subscriptions: what the streams store).
type wire struct {
	mu       sync.Mutex
	requests []*nats.Msg
	results  []*nats.Msg
}

func watch(t *testing.T, env *fleettest.Env, tenant, job string) *wire {
	t.Helper()
	w := &wire{}
	for subject, dst := range map[string]*[]*nats.Msg{
		env.Topo.NS.SampleSubject(tenant, job):     &w.requests,
		env.Topo.NS.ResultJobWildcard(tenant, job): &w.results,
	} {
		sub, err := env.NC.Subscribe(subject, func(m *nats.Msg) {
			w.mu.Lock()
			defer w.mu.Unlock()
			*dst = append(*dst, m)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := env.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *wire) get() (requests, results []*nats.Msg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*nats.Msg(nil), w.requests...), append([]*nats.Msg(nil), w.results...)
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func attrString(s sdktrace.ReadOnlySpan, key string) string {
	v, _ := attr(s, key)
	return v.AsString()
}

// byName returns the ended spans named name whose maker.job is job (any
// job for "").
func byName(exp *tracetest.InMemoryExporter, name, job string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name && (job == "" || hasJob(s, job)) {
			out = append(out, s)
		}
	}
	return out
}

func hasJob(s tracetest.SpanStub, job string) bool {
	for _, kv := range s.Attributes {
		if kv.Key == "maker.job" {
			return kv.Value.AsString() == job
		}
	}
	return false
}

// TestFleet runs jobs on a real in-process fleet (nats-server,
// redis-server, coordinator, voter, simulated model): with tracing off no
// message carries trace headers; with it on, the voter's spans are the
// children of the coordinator's request spans, in the step's trace, and
// the step span links the voters' answers; a forged traceparent starts a
// new trace.
func TestFleet(t *testing.T) {
	env := fleettest.New(t)
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 1})
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 4})
	const disks, k = 3, 2

	var sample *nats.Msg // a real request, for the forged one
	t.Run("off", func(t *testing.T) {
		spec := fleettest.HanoiSpec(disks, k, 1)
		w := watch(t, env, spec.Tenant, spec.JobID)
		if rep := env.Run(&spec); !rep.Solved {
			t.Fatalf("job %s: %s (%s)", spec.JobID, rep.State, rep.Reason)
		}
		reqs, _ := w.get()
		fleettest.Eventually(t, 10*time.Second, func() bool { _, res := w.get(); return len(res) >= len(reqs) },
			"results of %d requests", len(reqs))
		reqs, res := w.get()
		for _, m := range append(reqs, res...) {
			for _, h := range []string{tracing.HeaderTraceparent, tracing.HeaderTracestate} {
				if v := m.Header.Get(h); v != "" {
					t.Errorf("%s: header %s %q with tracing off", m.Subject, h, v)
				}
			}
		}
		// A request carries no header at all (no message id: each is
		// published once); a result only its message id.
		for _, m := range reqs {
			if len(m.Header) != 0 {
				t.Errorf("%s: headers %v, want none", m.Subject, m.Header)
			}
		}
		for _, m := range res {
			if len(m.Header) != 1 || m.Header.Get(jetstream.MsgIDHeader) == "" {
				t.Errorf("%s: headers %v, want only %s", m.Subject, m.Header, jetstream.MsgIDHeader)
			}
		}
		sample = reqs[0]
	})

	t.Run("on", func(t *testing.T) {
		exp := install(t)
		spec := fleettest.HanoiSpec(disks, k, 2)
		w := watch(t, env, spec.Tenant, spec.JobID)
		rep := env.Run(&spec)
		if !rep.Solved {
			t.Fatalf("job %s: %s (%s)", spec.JobID, rep.State, rep.Reason)
		}
		steps := byName(exp, "maker.step", spec.JobID)
		if int64(len(steps)) != rep.Steps {
			t.Fatalf("%d maker.step spans, want one per step (%d)", len(steps), rep.Steps)
		}
		stepOf := map[trace.TraceID]tracetest.SpanStub{}
		for _, s := range steps {
			if s.Parent.IsValid() {
				t.Errorf("step span %s has a parent %v", s.SpanContext.SpanID(), s.Parent)
			}
			ro := s.Snapshot()
			if v, ok := attr(ro, "maker.k"); !ok || v.AsInt64() != k {
				t.Errorf("step span: maker.k %v", v)
			}
			if len(attrString(ro, "maker.vote_hash")) != 16 || attrString(ro, "maker.rung") != schemas.RungOwnModel {
				t.Errorf("step span: vote hash %q rung %q", attrString(ro, "maker.vote_hash"), attrString(ro, "maker.rung"))
			}
			if _, ok := attr(ro, "maker.vote"); ok {
				t.Error("step span carries the answer (maker.vote); want only its hash and length")
			}
			if v, _ := attr(ro, "maker.samples"); v.AsInt64() < k {
				t.Errorf("step span: %d samples, want >= k", v.AsInt64())
			}
			stepOf[s.SpanContext.TraceID()] = s
		}
		if len(stepOf) != len(steps) {
			t.Errorf("%d step spans share %d trace ids, want a trace per step", len(steps), len(stepOf))
		}
		reqSpans := map[trace.SpanID]tracetest.SpanStub{}
		for _, s := range byName(exp, "maker.sample_request", "") {
			if st, ok := stepOf[s.SpanContext.TraceID()]; ok {
				if s.Parent.SpanID() != st.SpanContext.SpanID() {
					t.Errorf("request span's parent %s, want the step span %s", s.Parent.SpanID(), st.SpanContext.SpanID())
				}
				reqSpans[s.SpanContext.SpanID()] = s
			}
		}
		reqs, _ := w.get()
		if len(reqSpans) != len(reqs) || len(reqs) == 0 {
			t.Fatalf("%d request spans, %d requests published", len(reqSpans), len(reqs))
		}
		// The voter ends its span once the result is out: perhaps after
		// the report.
		fleettest.Eventually(t, 10*time.Second, func() bool { return len(byName(exp, "maker.sample", spec.JobID)) >= len(reqs) },
			"a maker.sample span per request (%d)", len(reqs))
		samples := map[trace.SpanID]bool{}
		for _, s := range byName(exp, "maker.sample", spec.JobID) {
			parent, ok := reqSpans[s.Parent.SpanID()]
			switch {
			case !ok || !s.Parent.IsRemote():
				t.Errorf("sample span's parent %v is no request span", s.Parent)
			case s.SpanContext.TraceID() != parent.SpanContext.TraceID():
				t.Errorf("sample span in trace %s, its request in %s", s.SpanContext.TraceID(), parent.SpanContext.TraceID())
			case wave(attrString(parent.Snapshot(), "maker.sample_id")) != wave(attrString(s.Snapshot(), "maker.sample_id")):
				// A request asks a wave's samples (Also): an answer's span
				// is under it, whichever of them it names.
				t.Errorf("sample span of %q under the request span of %q",
					attrString(s.Snapshot(), "maker.sample_id"), attrString(parent.Snapshot(), "maker.sample_id"))
			}
			if s.SpanKind != trace.SpanKindConsumer || attrString(s.Snapshot(), "maker.outcome") == "" {
				t.Errorf("sample span: kind %v, outcome %q", s.SpanKind, attrString(s.Snapshot(), "maker.outcome"))
			}
			samples[s.SpanContext.SpanID()] = true
		}
		calls := 0
		for _, s := range byName(exp, "maker.model_call", "") {
			if !samples[s.Parent.SpanID()] {
				continue
			}
			calls++
			ro := s.Snapshot()
			if attrString(ro, "maker.status") != "ok" || attrString(ro, "gen_ai.request.model") == "" {
				t.Errorf("model call span: status %q model %q", attrString(ro, "maker.status"), attrString(ro, "gen_ai.request.model"))
			}
			if v, _ := attr(ro, "gen_ai.usage.output_tokens"); v.AsInt64() <= 0 {
				t.Errorf("model call span: %d output tokens", v.AsInt64())
			}
		}
		if calls == 0 {
			t.Error("no maker.model_call span under the sample spans")
		}
		// Each step span links the answers it counted: those of one
		// request (a wave, SampleResult.Also) come from its one sample
		// span, in one or several messages, so at least one link.
		for _, s := range steps {
			linked := 0
			for _, l := range s.Links {
				if samples[l.SpanContext.SpanID()] && l.SpanContext.TraceID() == s.SpanContext.TraceID() {
					linked++
				}
			}
			if linked < 1 {
				t.Errorf("step span links %d sample spans of its trace (of %d links), want >= 1", linked, len(s.Links))
			}
		}
		// The wire: trace context, and a result's unchanged dedup id.
		_, res := w.get()
		for _, m := range reqs {
			if tracing.Remote(m.Header).IsValid() != true || m.Header.Get(jetstream.MsgIDHeader) != "" {
				t.Errorf("%s: headers %v, want a traceparent and no %s", m.Subject, m.Header, jetstream.MsgIDHeader)
			}
		}
		for _, m := range res {
			if tracing.Remote(m.Header).IsValid() != true || m.Header.Get(jetstream.MsgIDHeader) == "" {
				t.Errorf("%s: headers %v, want a traceparent and a %s", m.Subject, m.Header, jetstream.MsgIDHeader)
			}
		}
		sample = reqs[0]
	})

	t.Run("forged traceparent", func(t *testing.T) {
		if sample == nil {
			t.Skip("no request captured to forge one from")
		}
		exp := install(t)
		var req schemas.SampleRequest
		if err := schemas.Decode(sample.Data, &req); err != nil {
			t.Fatal(err)
		}
		req.JobID = jobs.NewJobID()
		req.SampleID = schemas.SampleID(req.Tenant, req.JobID, req.Step, req.Epoch, req.Index, req.Attempt)
		req.Also = nil // one sample: one answer, one span
		data, err := json.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		w := watch(t, env, req.Tenant, req.JobID)
		msg := &nats.Msg{Subject: env.Topo.NS.SampleSubject(req.Tenant, req.JobID), Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, req.SampleID)
		msg.Header.Set(tracing.HeaderTraceparent, "00-not-a-trace-at-all")
		msg.Header.Set(tracing.HeaderTracestate, "=,=,garbage")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := env.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		fleettest.Eventually(t, 10*time.Second, func() bool {
			_, res := w.get()
			return len(byName(exp, "maker.sample", req.JobID)) == 1 && len(res) == 1
		}, "the forged request answered and traced")
		s := byName(exp, "maker.sample", req.JobID)[0]
		if s.Parent.IsValid() || !s.SpanContext.IsValid() || !s.SpanContext.IsSampled() {
			t.Errorf("forged request's span: parent %v, context %v; want a new sampled trace", s.Parent, s.SpanContext)
		}
		if v := attrString(s.Snapshot(), "maker.outcome"); v != schemas.OutcomeVote {
			t.Errorf("forged request answered %q, want a vote", v)
		}
		_, res := w.get()
		if got := tracing.Remote(res[0].Header); got.TraceID() != s.SpanContext.TraceID() || got.SpanID() != s.SpanContext.SpanID() {
			t.Errorf("result carries %v, want the sample span %v", got, s.SpanContext)
		}
		if ts := res[0].Header.Get(tracing.HeaderTracestate); ts != "" {
			t.Errorf("result carries the forged tracestate %q", ts)
		}
	})
}

// wave is a sample id without its index and attempt: the step's wave.
func wave(sampleID string) string {
	parts := strings.Split(sampleID, "/")
	if len(parts) < 6 {
		return sampleID
	}
	return strings.Join(parts[:4], "/")
}
