package topology_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/app/devserver"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// The fleet's message ids, as a job's step publishes them: a request and a
// result per sample (samplesPerStep, k = 3's first wave), a decision
// entry per step.
const (
	benchTenant    = "default"
	benchJob       = "jmxbcx4i0-9995d2c076" // a job id as jobs.NewJobID makes them
	benchToken     = "AbCdEfGhIjKlMnOpQrStUv"
	samplesPerStep = 3
)

func requestID(step int64, i int) string {
	return schemas.SampleID(benchTenant, benchJob, step, schemas.EpochsPerLease, i, 0)
}

func resultID(step int64, i int) string {
	return schemas.ResultMsgID(requestID(step, i), benchToken, 1)
}

func journalID(step int64) string {
	return benchTenant + "/" + benchJob + "/" + schemas.EntryDecision + "/" + strconv.FormatInt(step, 10) + "/1"
}

// windowSetting is a release's duplicate windows and whether its sample
// requests carry ids.
type windowSetting struct {
	name          string
	requestIDs    bool
	work, journal time.Duration
}

var (
	windowsBefore = windowSetting{"before (2m, 10m, request ids)", true, 2 * time.Minute, 10 * time.Minute}
	windowsSized  = windowSetting{"sized (30s, 1m, no request ids)", false, topology.DefaultWorkDuplicates, topology.DefaultJournalDuplicates}
)

// heapBytes is the live heap after a collection: the in-process server's
// and the client's, which publishes garbage only.
func heapBytes() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// benchServer is an in-process nats-server and a JetStream client of it.
type benchServer struct {
	b   *testing.B
	js  jetstream.JetStream
	ctx context.Context
}

func startBenchServer(b *testing.B) (*benchServer, func()) {
	b.Helper()
	srv, err := devserver.RunNATS(devserver.NATSOptions{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	return &benchServer{b: b, js: js, ctx: ctx}, func() {
		cancel()
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// stream creates sc in memory with its messages capped (a work queue's
// are taken at once; only the ids are measured).
func (s *benchServer) stream(sc jetstream.StreamConfig) {
	sc.Storage, sc.Replicas, sc.MaxMsgs, sc.MaxBytes, sc.Discard = jetstream.MemoryStorage, 1, 1000, -1, jetstream.DiscardOld
	if _, err := s.js.CreateStream(s.ctx, sc); err != nil {
		s.b.Fatalf("stream %s: %v", sc.Name, err)
	}
}

func (s *benchServer) publish(subject, id string) {
	msg := &nats.Msg{Subject: subject, Data: []byte(`{"kind":"bench","pad":"................................"}`)}
	if id != "" {
		msg.Header = nats.Header{jetstream.MsgIDHeader: []string{id}}
	}
	_, err := s.js.PublishMsgAsync(msg)
	if errors.Is(err, jetstream.ErrTooManyStalledMsgs) { // a busy machine: let the server catch up
		s.settle()
		_, err = s.js.PublishMsgAsync(msg)
	}
	if err != nil {
		s.b.Fatal(err)
	}
}

// settle waits until the server acknowledged every publish.
func (s *benchServer) settle() {
	select {
	case <-s.js.PublishAsyncComplete():
	case <-s.ctx.Done():
		s.b.Fatal("publishes not acknowledged")
	}
}

// idBytes measures what the server holds for one id of each pattern: n
// messages with ids in a stream whose window keeps them all, less n
// messages without.
func idBytes(b *testing.B, n int) map[string]float64 {
	s, stop := startBenchServer(b)
	defer stop()
	patterns := []struct {
		name string
		id   func(i int) string
	}{
		{"none", func(int) string { return "" }},
		{"request", func(i int) string { return requestID(int64(i/samplesPerStep), i%samplesPerStep) }},
		{"result", func(i int) string { return resultID(int64(i/samplesPerStep), i%samplesPerStep) }},
		{"journal", func(i int) string { return journalID(int64(i)) }},
	}
	growth := map[string]float64{}
	for i, p := range patterns {
		name := fmt.Sprintf("COST%d", i)
		s.stream(jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"}, Duplicates: time.Hour})
		before := heapBytes()
		for j := range n {
			s.publish(strings.ToLower(name)+".x", p.id(j))
		}
		s.settle()
		growth[p.name] = float64(heapBytes()-before) / float64(n)
	}
	out := map[string]float64{}
	for _, p := range patterns[1:] {
		out[p.name] = growth[p.name] - growth["none"]
	}
	return out
}

// heapPoint is the heap after steps steps, and the ids the windows hold
// then.
type heapPoint struct {
	steps int64
	at    time.Duration
	heap  int64
	ids   int64
}

// timeline publishes steps at rate steps a second, as a job does, into the
// samples, results and journal streams as the table declares them with
// setting's windows divided by scale, and reads the heap every 1,000
// steps.
func timeline(b *testing.B, set windowSetting, scale time.Duration, rate, steps int64) []heapPoint {
	s, stop := startBenchServer(b)
	defer stop()
	ns := bus.DefaultNamespace
	cfg := topology.Config{WorkDuplicates: set.work, JournalDuplicates: set.journal}
	work, journal := set.work/scale, set.journal/scale
	for _, d := range topology.Table(ns, cfg, topology.JudgeConfig{}) {
		switch d.Name() {
		case ns.SamplesStream(), ns.ResultsStream():
			d.Stream.Duplicates = work
		case ns.JournalStream():
			d.Stream.Duplicates = journal
		default:
			continue
		}
		s.stream(d.Stream)
	}
	reqSj, resSj, jrSj := ns.SampleSubject(benchTenant, benchJob), ns.ResultSubject(benchTenant, benchJob, 1), ns.JournalSubject(benchTenant, benchJob)
	// held counts the ids the windows hold at t: each step's within its
	// stream's window of it.
	var sent []time.Duration
	held := func(t time.Duration) int64 {
		within := func(w time.Duration) int64 {
			i, _ := slices.BinarySearch(sent, t-w)
			return int64(len(sent) - i)
		}
		n := samplesPerStep*within(work) + within(journal)
		if set.requestIDs {
			n += samplesPerStep * within(work)
		}
		return n
	}
	base := heapBytes()
	start := time.Now()
	var out []heapPoint
	for step := int64(0); step < steps; {
		// Paced by the clock: behind (a collection below), catch up.
		for due := int64(time.Since(start).Seconds() * float64(rate)); step < steps && step < due; step++ {
			for i := range samplesPerStep {
				id := ""
				if set.requestIDs {
					id = requestID(step, i)
				}
				s.publish(reqSj, id)
				s.publish(resSj, resultID(step, i))
			}
			s.publish(jrSj, journalID(step))
			sent = append(sent, time.Since(start))
			if (step+1)%1000 == 0 {
				s.settle()
				at := time.Since(start)
				out = append(out, heapPoint{steps: step + 1, at: at, heap: heapBytes() - base, ids: held(at)})
			}
		}
		time.Sleep(time.Millisecond)
	}
	return out
}

// slope fits the heap of the points from steps lo to hi with a line and
// returns its slope in bytes a step (KB per 1,000 steps).
func slope(pts []heapPoint, lo, hi int64) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, p := range pts {
		if p.steps < lo || p.steps > hi {
			continue
		}
		x, y := float64(p.steps), float64(p.heap)
		n, sx, sy, sxx, sxy = n+1, sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	if n < 2 {
		return 0
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// BenchmarkDuplicateWindowMemory shows that nats-server's memory for
// duplicate windows is bounded, and how much lower the sized windows hold
// it than the windows before, in one run:
//
//  1. what the server keeps per id of each of the fleet's id patterns
//     (messages with ids in a window that keeps them all, less the same
//     without ids);
//
//  2. a job's steps (3 requests, 3 results, 1 decision) published at 1,000
//     steps a second into the samples, results and journal streams as the
//     table declares them, with each setting's windows divided by 120 so
//     that the run outlasts the longest (10 minutes become 5s): the heap
//     every 1,000 steps, beside the ids the windows hold then. Before, it
//     grows until the journal's window closes (5s; 10 minutes unscaled);
//     sized, it is flat after the first half second (a minute unscaled);
//     reported as the growth per 1,000 steps from 1,000 to 5,000 steps and
//     after;
//
//  3. the plateau each setting reaches in a job of any length at 1,000
//     steps a second with its real windows: ids held times their cost.
//     (The server keeps an expired id in its list until the list is three
//     times the ids held: between compactions it holds up to about twice
//     as much again, a bounded sawtooth.)
//
// Run it with:
//
//	go test -run '^$' -bench DuplicateWindowMemory -benchtime 1x ./internal/topology/
func BenchmarkDuplicateWindowMemory(b *testing.B) {
	const (
		scale = 120
		rate  = 1000
		steps = 8000
	)
	for b.Loop() {
		cost := idBytes(b, 30_000)
		b.Logf("bytes a held id: request %.0f, result %.0f, journal entry %.0f (ids %d, %d and %d bytes long)",
			cost["request"], cost["result"], cost["journal"], len(requestID(1000, 1)), len(resultID(1000, 1)), len(journalID(1000)))
		before := timeline(b, windowsBefore, scale, rate, steps)
		sized := timeline(b, windowsSized, scale, rate, steps)
		var tab strings.Builder
		fmt.Fprintf(&tab, "heap over the job (windows / %d), MB and ids held:\n%6s  %-28s  %-28s\n", scale, "steps", windowsBefore.name, windowsSized.name)
		for i := range min(len(before), len(sized)) {
			if n := before[i].steps; n > 2000 && n%2000 != 0 {
				continue // a benchmark's log keeps 10 lines
			}
			fmt.Fprintf(&tab, "%6d  %6.2f MB %8d ids %5.1fs  %6.2f MB %8d ids %5.1fs\n", before[i].steps,
				float64(before[i].heap)/1e6, before[i].ids, before[i].at.Seconds(), float64(sized[i].heap)/1e6, sized[i].ids, sized[i].at.Seconds())
		}
		b.Log(strings.TrimSuffix(tab.String(), "\n"))
		// Growth (KB per 1,000 steps, a least-squares fit) while the
		// journal's window before is open (1,000 to 5,000 steps: 1s to 5s,
		// past every sized window), and after every window closed.
		b.ReportMetric(slope(before, 1000, 5000), "before_KB/1k_steps")
		b.ReportMetric(slope(sized, 1000, 5000), "sized_KB/1k_steps")
		b.ReportMetric(slope(before, 5000, steps), "before_late_KB/1k_steps")
		b.ReportMetric(slope(sized, 5000, steps), "sized_late_KB/1k_steps")
		plateau := func(set windowSetting) float64 {
			ids := samplesPerStep*rate*set.work.Seconds()*cost["result"] + rate*set.journal.Seconds()*cost["journal"]
			if set.requestIDs {
				ids += samplesPerStep * rate * set.work.Seconds() * cost["request"]
			}
			return ids / 1e6
		}
		b.ReportMetric(plateau(windowsBefore), "before_plateau_MB")
		b.ReportMetric(plateau(windowsSized), "sized_plateau_MB")
		b.Logf("plateau at %d steps/s with the real windows: before %.0f MB (reached 10 minutes into a job), sized %.0f MB (1 minute)",
			rate, plateau(windowsBefore), plateau(windowsSized))
	}
}
