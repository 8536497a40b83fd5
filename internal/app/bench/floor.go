package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/internal/app/devserver"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
)

// The floor: the least work one MAKER step can cost on this machine's
// loopback, measured beside maker bench in the same run (issue "The
// paper's million steps": maker bench >= 0.8x the floor). It mirrors the
// reference program the issue names (../shared/floor, run as `floor -mode
// vote -consumers shared -eval voter -storage file -embedded`), which
// lives outside this repository: per step, 3 sample requests published to
// a JetStream work queue (file storage, an embedded nats-server), pulled
// by 3 voters on connections of their own from one shared durable
// consumer (one message at a time), each counting its answer with one
// Redis EVAL (HINCRBY, EXPIRE, HGETALL: leader and margin) and replying on
// a core subject; the step ends when the 3 replies and the 3 publish acks
// are in. No model, no task, no journal, no decision: every line of
// maker's own work is missing from it.

// floorVoteLua is the reference program's vote script, as is.
const floorVoteLua = `
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('EXPIRE', KEYS[1], 600)
local v = redis.call('HGETALL', KEYS[1])
local best, second, leader = 0, 0, ''
for i = 1, #v, 2 do
  local c = tonumber(v[i+1])
  if c > best then second = best; best = c; leader = v[i]
  elseif c > second then second = c end
end
return {leader, best - second}
`

// floorVoters is the floor's samples a step, and its voters.
const floorVoters = 3

// floorLoop is a running floor: its own nats-server and store, a Redis
// client on the bench fleet's Redis, 3 voters.
type floorLoop struct {
	rdb     redis.UniversalClient
	nc      *nats.Conn
	js      jetstream.JetStream
	replies chan *nats.Msg
	inbox   string
	prefix  string
	seq     int
	close   []func()
}

// startFloor starts the floor's nats-server (file store in a new
// directory under the temp dir, like the reference's -embedded) and
// voters, counting in the Redis at redisURL under keys of its own.
func startFloor(ctx context.Context, redisURL string) (_ *floorLoop, err error) {
	fl := &floorLoop{prefix: "floor-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"}
	defer func() {
		if err != nil {
			fl.Close()
		}
	}()
	dir, err := os.MkdirTemp("", "maker-floor-")
	if err != nil {
		return nil, err
	}
	fl.close = append(fl.close, func() { _ = os.RemoveAll(dir) })
	ns, err := devserver.RunNATS(devserver.NATSOptions{StoreDir: dir})
	if err != nil {
		return nil, err
	}
	fl.close = append(fl.close, func() { ns.Shutdown(); ns.WaitForShutdown() })
	if fl.rdb, _, err = store.NewRedisClient(redisURL); err != nil {
		return nil, err
	}
	fl.close = append(fl.close, func() { _ = fl.rdb.Close() })
	script := redis.NewScript(floorVoteLua)
	if err := script.Load(ctx, fl.rdb).Err(); err != nil {
		return nil, err
	}
	if fl.nc, err = nats.Connect(ns.ClientURL()); err != nil {
		return nil, err
	}
	fl.close = append(fl.close, fl.nc.Close)
	if fl.js, err = jetstream.New(fl.nc); err != nil {
		return nil, err
	}
	if _, err := fl.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "VOTEBENCH", Subjects: []string{"vb.task.>"}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy,
	}); err != nil {
		return nil, err
	}
	for v := range floorVoters {
		if err := fl.startVoter(ctx, ns.ClientURL(), v, script); err != nil {
			return nil, err
		}
	}
	fl.inbox = nats.NewInbox()
	fl.replies = make(chan *nats.Msg, 64)
	if _, err := fl.nc.ChanSubscribe(fl.inbox, fl.replies); err != nil {
		return nil, err
	}
	return fl, fl.nc.Flush()
}

// startVoter starts voter v: its own connection, pulling one request at a
// time from the shared durable, one EVAL, a core reply, then the ack.
func (fl *floorLoop) startVoter(ctx context.Context, url string, v int, script *redis.Script) error {
	vnc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	fl.close = append(fl.close, vnc.Close)
	vjs, err := jetstream.New(vnc)
	if err != nil {
		return err
	}
	c, err := vjs.CreateOrUpdateConsumer(ctx, "VOTEBENCH", jetstream.ConsumerConfig{
		Durable: "voters", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000,
	})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(v), 1))
	vid := strconv.Itoa(v)
	cc, err := c.Consume(func(m jetstream.Msg) {
		ans := []string{"A", "A", "B"}[rng.IntN(3)] // the "LLM answer"
		out := nats.NewMsg(m.Headers().Get("Reply-Inbox"))
		out.Header.Set("Voter", vid)
		out.Header.Set("Answer", ans)
		if res, err := script.Run(ctx, fl.rdb, []string{fl.prefix + m.Headers().Get("Step")}, ans).Slice(); err == nil && len(res) == 2 {
			out.Header.Set("Leader", fmt.Sprint(res[0]))
			out.Header.Set("Margin", fmt.Sprint(res[1]))
		}
		_ = vnc.PublishMsg(out)
		_ = m.Ack()
	}, jetstream.PullMaxMessages(1))
	if err != nil {
		return err
	}
	fl.close = append(fl.close, cc.Stop)
	return nil
}

// step runs one floor step.
func (fl *floorLoop) step(ctx context.Context) error {
	fl.seq++
	s := strconv.Itoa(fl.seq)
	var futs [floorVoters]jetstream.PubAckFuture
	for v := range floorVoters {
		m := nats.NewMsg("vb.task." + strconv.Itoa(v))
		m.Header.Set("Reply-Inbox", fl.inbox)
		m.Header.Set("Step", s)
		m.Data = []byte(`{"step":` + s + `,"prompt":"move disk"}`)
		f, err := fl.js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		futs[v] = f
	}
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for got := 0; got < floorVoters; got++ {
		select {
		case <-fl.replies:
		case <-timeout.C:
			return fmt.Errorf("floor: step %d timed out after %d replies", fl.seq, got)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		}
	}
	return nil
}

// run times n steps and returns steps/s.
func (fl *floorLoop) run(ctx context.Context, n int) (float64, error) {
	start := time.Now()
	for range n {
		if err := fl.step(ctx); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// Close stops the floor, newest first.
func (fl *floorLoop) Close() {
	for i := len(fl.close) - 1; i >= 0; i-- {
		fl.close[i]()
	}
	fl.close = nil
}

// floorWarmup and FloorSteps are the reference program's warm-up and
// the steps of one measured run (its -n 3000).
const (
	floorWarmup = 300
	FloorSteps  = 3000
)

// FloorResult is maker bench --floor's comparison.
type FloorResult struct {
	// FloorStepsPerSecond are the floor's runs (3 samples a step);
	// BenchStepsPerSecond the measured jobs', alternating with them.
	FloorStepsPerSecond []float64 `json:"floor_steps_per_second"`
	BenchStepsPerSecond []float64 `json:"bench_steps_per_second"`
	FloorMedian         float64   `json:"floor_median"`
	BenchMedian         float64   `json:"bench_median"`
	// Ratio is the medians' ratio in steps/s; SampleRatio in samples/s
	// (the floor draws 3 samples a step, a job what its k needs).
	Ratio          float64 `json:"ratio"`
	SampleRatio    float64 `json:"sample_ratio"`
	SamplesPerStep float64 `json:"samples_per_step"`
	Target         float64 `json:"target"`
}

// targetVsFloor: maker bench >= 0.8x the floor (issue "The paper's
// million steps").
const targetVsFloor = 0.8

// floorOf compares the floor's runs with the measured jobs' reports.
func floorOf(floorRuns []float64, reps []schemas.JobReport) *FloorResult {
	fr := &FloorResult{FloorStepsPerSecond: floorRuns, Target: targetVsFloor}
	var perStep []float64
	for _, r := range reps {
		fr.BenchStepsPerSecond = append(fr.BenchStepsPerSecond, math.Round(r.StepsPerSecond))
		perStep = append(perStep, r.SamplesPerStep)
	}
	fr.FloorMedian, fr.BenchMedian, fr.SamplesPerStep = median(floorRuns), median(fr.BenchStepsPerSecond), median(perStep)
	if fr.FloorMedian > 0 {
		fr.Ratio = math.Round(fr.BenchMedian/fr.FloorMedian*100) / 100
		fr.SampleRatio = math.Round(fr.BenchMedian*fr.SamplesPerStep/(fr.FloorMedian*floorVoters)*100) / 100
	}
	return fr
}
