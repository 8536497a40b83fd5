// Package store is the fleet's Redis code, all of it: the vote tally of
// each job's open step (the rule of internal/core/vote, applied atomically
// for a fleet of coordinators), the tenants' limiter (limiter.go: token
// buckets, samples in flight, the fleet's capacity shared weighted-fair,
// priorities, running jobs), the budgets (budget.go: reserve, settle,
// claim, in nano-dollars), the --redis URL dialect (url.go) and the
// capability secret (secret.go).
//
// Each atomic operation is one Lua script, embedded from the .lua file next
// to its caller; for the tally: open_step.lua opens a step (exactly once per step and epoch),
// record_sample.lua records a sample idempotently by its index, counts the
// step's samples in index order, tests the first-to-ahead-by-k margin and
// closes the step exactly once, and close_step.lua closes a step without a
// decision. Scripts are idempotent, because go-redis retries commands whose
// replies were lost: a retried record of a decided step replays the stored
// decision instead of deciding twice.
//
// Only the open step lives in Redis; a decided step's slots and tally are
// deleted as the next step opens, so nothing grows with the step count.
// Works against Redis 6.2+ and miniredis (which runs the same Lua).
package store

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/schemas"
)

var (
	//go:embed open_step.lua
	openStepLua string
	//go:embed record_sample.lua
	recordSampleLua string
	//go:embed close_step.lua
	closeStepLua string

	openStepScript     = redis.NewScript(openStepLua)
	recordSampleScript = redis.NewScript(recordSampleLua)
	closeStepScript    = redis.NewScript(closeStepLua)
)

// Sentinel errors.
var (
	// ErrNoStep means the job has no open step in Redis: its hot state is
	// gone (flushed, expired or never opened).
	ErrNoStep = vote.ErrNoStep
	// ErrStaleOpen means a later step or epoch is already open.
	ErrStaleOpen = vote.ErrStaleOpen
	// ErrReply means a script answered something this build cannot read.
	ErrReply = errors.New("store: unexpected script reply")
)

// Config configures a Store.
type Config struct {
	// KeyTTL is refreshed on every write; a job idle this long loses its
	// hot state. Default 7 days.
	KeyTTL time.Duration
	// KeyPrefix starts every key; fleets sharing a Redis with different
	// prefixes share no key. Default "maker".
	KeyPrefix string
}

// Store runs the tally scripts. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	ttl    string
	prefix string
	// records commits concurrent RecordMany calls together (group.go).
	records *group
}

// New returns a Store on rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("store: nil redis client")
	}
	if cfg.KeyTTL == 0 {
		cfg.KeyTTL = 7 * 24 * time.Hour
	}
	if cfg.KeyTTL < time.Second {
		return nil, fmt.Errorf("store: KeyTTL %v is under a second", cfg.KeyTTL)
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}: \t\r\n") {
		return nil, fmt.Errorf("store: KeyPrefix %q may not hold braces, colons or spaces", cfg.KeyPrefix)
	}
	s := &Store{rdb: rdb, ttl: strconv.FormatInt(cfg.KeyTTL.Milliseconds(), 10), prefix: cfg.KeyPrefix}
	s.records = &group{exec: s.execRecords}
	return s, nil
}

// execRecords sends calls' record_sample commands in one pipeline; each
// command's error, if any, is read by its caller.
func (s *Store) execRecords(ctx context.Context, calls []*groupCall) {
	pipe := s.rdb.Pipeline()
	for _, c := range calls {
		c.cmds = make([]*redis.Cmd, len(c.args))
		for i, a := range c.args {
			c.cmds[i] = recordSampleScript.EvalSha(ctx, pipe, c.keys, a...)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
}

// Load loads the scripts into Redis ahead of use, so the first vote does
// not pay for it. Scripts are reloaded on demand after a SCRIPT FLUSH.
func (s *Store) Load(ctx context.Context) error {
	for _, sc := range []*redis.Script{openStepScript, recordSampleScript, closeStepScript} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("store: load script: %w", err)
		}
	}
	return nil
}

// OpenStep opens step under epoch. Reopening the open step is a no-op that
// returns its counters (opened false).
func (s *Store) OpenStep(ctx context.Context, job JobRef, step, epoch int64) (c vote.Counters, opened bool, err error) {
	res, err := openStepScript.Run(ctx, s.rdb, job.keys(s.prefix), step, epoch, s.ttl).Slice()
	if err != nil {
		return vote.Counters{}, false, fmt.Errorf("store: open step %d: %w", step, err)
	}
	if len(res) != 7 {
		return vote.Counters{}, false, fmt.Errorf("%w: open_step returned %d values", ErrReply, len(res))
	}
	r := reader{vals: res}
	code := r.int(0)
	c = vote.Counters{Step: r.int(1), Epoch: r.int(2), Next: int(r.int(3)), Valid: int(r.int(4)), RedFlagged: int(r.int(5)), Lead: int(r.int(6))}
	if r.err != nil {
		return vote.Counters{}, false, r.err
	}
	if code == -1 {
		return c, false, fmt.Errorf("%w: open is step %d epoch %d", ErrStaleOpen, c.Step, c.Epoch)
	}
	return c, code == 1, nil
}

// Record records smp for job and, if it completes a lead of k, decides the
// step and opens the next one.
func (s *Store) Record(ctx context.Context, job JobRef, smp vote.Sample, k int) (vote.RecordResult, error) {
	res, err := s.RecordMany(ctx, job, []vote.Sample{smp}, k)
	if err != nil {
		return vote.RecordResult{}, err
	}
	return res[0], nil
}

// RecordMany records samples in order, in one round trip (shared with
// other jobs' calls made at the same time: group.go): each is its own
// atomic script call, exactly as if Record were called for each in turn.
// On error no result is returned; recording is idempotent, so the caller
// may simply record the same samples again.
func (s *Store) RecordMany(ctx context.Context, job JobRef, samples []vote.Sample, k int) ([]vote.RecordResult, error) {
	if len(samples) == 0 {
		return nil, nil
	}
	keys := job.keys(s.prefix)
	args := make([][]any, len(samples))
	for i, smp := range samples {
		value := "v" + smp.VoteKey
		if smp.VoteKey == "" {
			value = "r" + smp.RedFlag
		}
		args[i] = []any{smp.Step, smp.Epoch, smp.Index, value, k, s.ttl}
		if smp.AfterWinner != "" {
			args[i] = append(args[i], smp.AfterWinner)
		}
	}
	call := &groupCall{keys: keys, args: args}
	if err := s.records.do(ctx, call); err != nil {
		return nil, fmt.Errorf("store: record step %d: %w", samples[0].Step, err)
	}
	out := make([]vote.RecordResult, len(samples))
	for i, cmd := range call.cmds {
		res, err := cmd.Slice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// The script cache was flushed: this call did not run. Run it
			// again, loading the script; later ones in the batch follow.
			res, err = recordSampleScript.Run(ctx, s.rdb, keys, args[i]...).Slice()
		}
		if err != nil {
			return nil, fmt.Errorf("store: record step %d index %d: %w", samples[i].Step, samples[i].Index, err)
		}
		if out[i], err = readRecord(job, res); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readRecord(job JobRef, res []any) (vote.RecordResult, error) {
	if len(res) != 10 {
		return vote.RecordResult{}, fmt.Errorf("%w: record_sample returned %d values", ErrReply, len(res))
	}
	r := reader{vals: res}
	code := r.int(0)
	c := vote.Counters{Step: r.int(1), Epoch: r.int(2), Next: int(r.int(3)), Valid: int(r.int(4)), RedFlagged: int(r.int(5)), Lead: int(r.int(6))}
	votes := int(r.int(7))
	winner := r.str(8)
	tallyJSON := r.str(9)
	if r.err != nil {
		return vote.RecordResult{}, r.err
	}
	out := vote.RecordResult{Counters: c}
	switch code {
	case 1:
		out.Outcome = vote.Recorded
	case 0:
		out.Outcome = vote.Duplicate
	case -1:
		out.Outcome = vote.Stale
	case -3:
		out.Outcome = vote.NotYet
	case -2:
		return vote.RecordResult{}, fmt.Errorf("%w: job %s/%s", ErrNoStep, job.Tenant, job.JobID)
	case 2, 3:
		out.Outcome = vote.Decided
		if code == 3 {
			out.Outcome = vote.Replayed
		}
		tally, err := decodeTally(tallyJSON)
		if err != nil {
			return vote.RecordResult{}, err
		}
		out.Decision = &vote.Decision{
			Step: c.Step, Epoch: c.Epoch, Winner: winner, Votes: votes, Lead: c.Lead,
			Counted: c.Next, Valid: c.Valid, RedFlagged: c.RedFlagged, Tally: tally,
		}
	default:
		return vote.RecordResult{}, fmt.Errorf("%w: record_sample code %d", ErrReply, code)
	}
	return out, nil
}

// CloseStep closes the open step without a decision and returns its tally.
// closed is false when it was already closed.
func (s *Store) CloseStep(ctx context.Context, job JobRef, step, epoch int64) (tally []schemas.TallyEntry, closed bool, err error) {
	res, err := closeStepScript.Run(ctx, s.rdb, job.keys(s.prefix), step, epoch, s.ttl).Slice()
	if err != nil {
		return nil, false, fmt.Errorf("store: close step %d: %w", step, err)
	}
	if len(res) != 2 {
		return nil, false, fmt.Errorf("%w: close_step returned %d values", ErrReply, len(res))
	}
	r := reader{vals: res}
	code := r.int(0)
	tallyJSON := r.str(1)
	if r.err != nil {
		return nil, false, r.err
	}
	if code == -1 {
		return nil, false, fmt.Errorf("%w: step %d epoch %d is not open", ErrNoStep, step, epoch)
	}
	tally, err = decodeTally(tallyJSON)
	return tally, code == 1, err
}

// DeleteJob removes every key of job.
func (s *Store) DeleteJob(ctx context.Context, job JobRef) error {
	if err := s.rdb.Del(ctx, job.keys(s.prefix)...).Err(); err != nil {
		return fmt.Errorf("store: delete job: %w", err)
	}
	return nil
}

// AddFailure counts a failed attempt at job and returns the count so far.
// The count expires a day after the last failure.
func (s *Store) AddFailure(ctx context.Context, job JobRef) (int64, error) {
	key := job.failuresKey(s.prefix)
	pipe := s.rdb.TxPipeline()
	n := pipe.Incr(ctx, key)
	pipe.Expire(ctx, key, 24*time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("store: count failure: %w", err)
	}
	return n.Val(), nil
}

// ClearFailures forgets job's failed attempts.
func (s *Store) ClearFailures(ctx context.Context, job JobRef) error {
	if err := s.rdb.Del(ctx, job.failuresKey(s.prefix)).Err(); err != nil {
		return fmt.Errorf("store: clear failures: %w", err)
	}
	return nil
}

// decodeTally reads [key1, votes1, ...] and sorts it most votes first, then
// by key, so reports are deterministic.
func decodeTally(s string) ([]schemas.TallyEntry, error) {
	if s == "" || s == "[]" || s == "{}" {
		return nil, nil
	}
	var flat []any
	if err := json.Unmarshal([]byte(s), &flat); err != nil || len(flat)%2 != 0 {
		return nil, fmt.Errorf("%w: tally %q", ErrReply, s)
	}
	out := make([]schemas.TallyEntry, 0, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		key, ok1 := flat[i].(string)
		n, ok2 := flat[i+1].(float64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: tally %q", ErrReply, s)
		}
		out = append(out, schemas.TallyEntry{VoteKey: key, Votes: int(n)})
	}
	vote.SortTally(out)
	return out, nil
}

// reader decodes script replies, keeping the first error.
type reader struct {
	vals []any
	err  error
}

func (r *reader) int(i int) int64 {
	switch v := r.vals[i].(type) {
	case int64:
		return v
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil && r.err == nil {
			r.err = fmt.Errorf("%w: value %d: %q is not an integer", ErrReply, i, v)
		}
		return n
	}
	if r.err == nil {
		r.err = fmt.Errorf("%w: value %d has type %T", ErrReply, i, r.vals[i])
	}
	return 0
}

func (r *reader) str(i int) string {
	switch v := r.vals[i].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	if r.err == nil {
		r.err = fmt.Errorf("%w: value %d has type %T", ErrReply, i, r.vals[i])
	}
	return ""
}

// DeletePrefix removes every key that starts with prefix + ":" (a whole
// namespace's keys: a private run's, when it ends). On a Redis Cluster
// every master is scanned.
func DeletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	if prefix == "" || strings.ContainsAny(prefix, "*?[]\\") {
		return fmt.Errorf("store: delete prefix %q: not a plain key prefix", prefix)
	}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, prefix+":*", 500).Iterator()
		var batch []string
		for iter.Next(ctx) {
			// One key at a time on a cluster node: keys of different jobs
			// live in different slots.
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				if err := unlinkEach(ctx, c, batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		return unlinkEach(ctx, c, batch)
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return fmt.Errorf("store: delete keys %s:*: %w", prefix, err)
	}
	return nil
}

func unlinkEach(ctx context.Context, c redis.Cmdable, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := c.Pipeline()
	for _, k := range keys {
		pipe.Unlink(ctx, k)
	}
	_, err := pipe.Exec(ctx)
	return err
}
