// Package presence keeps the fleet's presence records, what the fleet
// view (GET /v1/fleet, maker fleet) shows of who is alive.
//
// Each voter and each coordinator runs a Publisher: every Interval it puts
// its own record (schemas.VoterPresence under voter.<id>,
// schemas.CoordinatorPresence under coordinator.<id>) into the presence
// bucket (maker_presence, declared in internal/topology with a TTL), and
// deletes it when it stops. A process that dies stops renewing its
// record, and the bucket forgets it within the TTL.
//
// Read and View read the bucket: every record is decoded strictly and
// checked against the key it sits under; an invalid, oversized,
// misplaced or stale one is skipped (counted, never an error). A record
// is its writer's claim: informational only, never used for a decision.
package presence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// The roles that publish presence, the first token of their keys.
const (
	RoleVoter       = "voter"
	RoleCoordinator = "coordinator"
)

// DefaultInterval is how often a Publisher renews its record.
const DefaultInterval = 5 * time.Second

// Config configures a Publisher. Zero fields take the documented
// defaults.
type Config struct {
	// Namespace of the fleet; "" is bus.DefaultNamespace.
	Namespace bus.Namespace
	// Interval is how often the record is renewed. Default
	// DefaultInterval; it should be well under the bucket's TTL
	// (topology.Config.PresenceTTL, default 30s).
	Interval time.Duration
	// Logger receives the publisher's notices. Default slog.Default().
	Logger *slog.Logger
}

// Publisher renews one presence record until it stops.
type Publisher struct {
	js     jetstream.JetStream
	cfg    Config
	key    string
	record func(now time.Time) schemas.Message
	kv     jetstream.KeyValue
	warned bool
}

// NewPublisher returns a Publisher of the record of role ("voter" or
// "coordinator") written by id; record makes the record at each renewal.
func NewPublisher(js jetstream.JetStream, role, id string, record func(now time.Time) schemas.Message, cfg Config) (*Publisher, error) {
	if role != RoleVoter && role != RoleCoordinator {
		return nil, fmt.Errorf("presence: unknown role %q", role)
	}
	if id == "" || record == nil || js == nil {
		return nil, errors.New("presence: id, record and js are required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Interval < 10*time.Millisecond {
		return nil, fmt.Errorf("presence: interval %v too short", cfg.Interval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Publisher{js: js, cfg: cfg, key: schemas.PresenceKey(role, id), record: record}, nil
}

// Key is the bucket key the publisher writes.
func (p *Publisher) Key() string { return p.key }

// Run renews the record at once and then every Interval until ctx is
// done, then deletes it (so a process that stops cleanly leaves the view
// at once). A failed put is logged and tried again at the next tick: a
// presence record never stops its writer.
func (p *Publisher) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		p.Publish(ctx)
		select {
		case <-ctx.Done():
			p.remove()
			return
		case <-t.C:
		}
	}
}

// Publish puts the record once.
func (p *Publisher) Publish(ctx context.Context) {
	if err := p.publish(ctx); err != nil && !p.warned {
		p.warned = true // once: a fleet made by an older release has no bucket
		p.cfg.Logger.Warn("cannot publish presence; this process is missing from the fleet view (maker fleet)", "key", p.key, "err", err)
	} else if err == nil {
		p.warned = false
	}
}

func (p *Publisher) publish(ctx context.Context) error {
	rec := p.record(time.Now().UTC())
	data, err := schemas.Encode(rec)
	if err != nil {
		return err
	}
	if len(data) > schemas.MaxPresenceBytes {
		return fmt.Errorf("presence: record of %d bytes over %d", len(data), schemas.MaxPresenceBytes)
	}
	if p.kv == nil {
		kv, err := p.js.KeyValue(ctx, p.cfg.Namespace.PresenceBucket())
		if err != nil {
			return fmt.Errorf("presence: bucket %s: %w", p.cfg.Namespace.PresenceBucket(), err)
		}
		p.kv = kv
	}
	_, err = p.kv.Put(ctx, p.key, data)
	return err
}

// remove deletes the record, with a short timeout of its own (the run's
// ctx is done).
func (p *Publisher) remove() {
	if p.kv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.kv.Delete(ctx, p.key); err != nil {
		p.cfg.Logger.Debug("presence: delete on stop", "key", p.key, "err", err)
	}
}

// MaxRecords bounds the records Read looks at; the rest are skipped.
const MaxRecords = 5000

// Records are the live presence records, each kind sorted by id.
type Records struct {
	Voters       []schemas.VoterPresence
	Coordinators []schemas.CoordinatorPresence
	// Skipped counts the records left out: invalid, oversized, under a
	// key that is not their writer's, stale, or beyond MaxRecords.
	Skipped int
	// TTL is the bucket's.
	TTL time.Duration
}

// ErrNoBucket: the namespace has no presence bucket (a fleet made by an
// older release, or none at all).
var ErrNoBucket = errors.New("presence: no presence bucket (start a coordinator of this release, or run maker topology create)")

// Read reads the live presence records of namespace ns at now. A record
// whose at is older than twice the bucket's TTL is stale (its writer's
// clock is off, or the server has not expired it yet) and skipped.
func Read(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, now time.Time) (Records, error) {
	var out Records
	kv, err := js.KeyValue(ctx, ns.PresenceBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, ErrNoBucket
	}
	if err != nil {
		return out, fmt.Errorf("presence: bucket %s: %w", ns.PresenceBucket(), err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return out, fmt.Errorf("presence: bucket %s: %w", ns.PresenceBucket(), err)
	}
	out.TTL = st.TTL()
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return out, fmt.Errorf("presence: read %s: %w", ns.PresenceBucket(), err)
	}
	defer func() { _ = w.Stop() }()
	seen := 0
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case e = <-w.Updates():
		}
		if e == nil {
			break // the initial values are all in
		}
		if seen++; seen > MaxRecords {
			out.Skipped++
			continue
		}
		if !out.add(e.Key(), e.Value(), now) {
			out.Skipped++
		}
	}
	slices.SortFunc(out.Voters, func(a, b schemas.VoterPresence) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(out.Coordinators, func(a, b schemas.CoordinatorPresence) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// add decodes one record under key; false when it is skipped.
func (r *Records) add(key string, data []byte, now time.Time) bool {
	if len(data) > schemas.MaxPresenceBytes {
		return false
	}
	role, _, _ := strings.Cut(key, ".")
	fresh := func(at time.Time) bool {
		return r.TTL <= 0 || now.Sub(at) <= 2*r.TTL
	}
	switch role {
	case RoleVoter:
		var p schemas.VoterPresence
		if schemas.Decode(data, &p) != nil || schemas.PresenceKey(role, p.ID) != key || !fresh(p.At) {
			return false
		}
		r.Voters = append(r.Voters, p)
	case RoleCoordinator:
		var p schemas.CoordinatorPresence
		if schemas.Decode(data, &p) != nil || schemas.PresenceKey(role, p.ID) != key || !fresh(p.At) {
			return false
		}
		r.Coordinators = append(r.Coordinators, p)
	default:
		return false
	}
	return true
}

// Clip is s cut to at most n bytes, on a rune boundary: how a role fits
// its host and build names into its record's bounds.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
