package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/schemas"
)

// MaxDeliveriesAdvisory is the subject on which the server announces that
// a consumer gave up on a message after its MaxDeliver deliveries.
func MaxDeliveriesAdvisory(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

// MaxDeliveriesEvent is the part of the server's advisory we read.
type MaxDeliveriesEvent struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// jobOf returns the tenant and job of a per-job subject of ns
// (<ns>.v1.<kind>.<tenant>.<job>[...]); "unknown" parts when it is not one.
func (ns Namespace) jobOf(subject string) (tenant, job string) {
	parts := strings.Split(subject, ".")
	if len(parts) >= 5 && parts[0] == ns.String() && parts[1] == "v1" {
		if schemas.ValidTenant(parts[3]) == nil && schemas.ValidJobID(parts[4]) == nil {
			return parts[3], parts[4]
		}
	}
	return "unknown", "unknown"
}

// DeadLetterHead is how much of an original payload a dead letter keeps
// when the whole would not fit (see PublishDeadLetter).
const DeadLetterHead = 4 << 10

// PublishDeadLetter stores dl in the dead-letter stream, under the job its
// original subject names. Its message id is the original's stream and
// sequence, so reporting the same message twice (two coordinators seeing
// one advisory, a retry) stores it once.
//
// A dead letter must always fit: an original near the size limit, kept
// whole (and base64-encoded in JSON), would exceed the server's max
// payload or the stream's max message size, the dead letter could never
// be stored and the original would stay un-acked for good. So when the
// encoded dead letter would not fit it keeps a reference instead: the
// original's stream and sequence (already in dl), its size and SHA-256,
// and its first DeadLetterHead bytes (dl.Truncated).
func PublishDeadLetter(ctx context.Context, js jetstream.JetStream, ns Namespace, dl *schemas.DeadLetter) error {
	sum := sha256.Sum256(dl.Data)
	if !dl.Truncated {
		dl.Size, dl.SHA256 = len(dl.Data), hex.EncodeToString(sum[:])
	}
	data, err := schemas.Encode(dl)
	if err != nil {
		return fmt.Errorf("bus: dead letter: %w", err)
	}
	if limit := deadLetterLimit(ctx, js, ns); len(data) > limit && !dl.Truncated {
		dl.Data, dl.Truncated = dl.Data[:min(len(dl.Data), DeadLetterHead)], true
		if data, err = schemas.Encode(dl); err != nil {
			return fmt.Errorf("bus: dead letter: %w", err)
		}
	}
	tenant, job := ns.jobOf(dl.Subject)
	msg := &nats.Msg{Subject: ns.DLQSubject(tenant, job), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, "dlq/"+dl.Stream+"/"+strconv.FormatUint(dl.Seq, 10))
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("bus: dead letter: %w", err)
	}
	return nil
}

// deadLetterLimit is the largest dead letter (its payload) that can be
// stored and read back: the least of what schemas decodes, the server's
// max payload and the DLQ stream's max message size, less room for the
// headers.
func deadLetterLimit(ctx context.Context, js jetstream.JetStream, ns Namespace) int {
	limit := int64(schemas.MaxMessageBytes)
	if nc := js.Conn(); nc != nil && nc.MaxPayload() > 0 {
		limit = min(limit, nc.MaxPayload())
	}
	if s, err := js.Stream(ctx, ns.DLQStream()); err == nil {
		if m := s.CachedInfo().Config.MaxMsgSize; m > 0 {
			limit = min(limit, int64(m))
		}
	}
	return int(limit) - 1<<10
}

// ListDeadLetters returns the dead letters of tenant/job ("" for every
// tenant or job), oldest first, at most max of them.
func ListDeadLetters(ctx context.Context, js jetstream.JetStream, ns Namespace, tenant, job string, max int) ([]schemas.StoredDeadLetter, error) {
	filter := ns.DLQWildcard()
	switch {
	case tenant != "" && job != "":
		filter = ns.DLQSubject(tenant, job)
	case tenant != "":
		filter = ns.subject("dlq") + tenant + ".*"
	case job != "":
		filter = ns.subject("dlq") + "*." + job
	}
	if max <= 0 {
		return nil, nil
	}
	var out []schemas.StoredDeadLetter
	err := ReadOrdered(ctx, js, ReadRange{Stream: ns.DLQStream(), Subjects: []string{filter}}, func(seq uint64, data []byte) error {
		var dl schemas.DeadLetter
		if err := schemas.Decode(data, &dl); err != nil {
			dl = schemas.DeadLetter{Reason: "unreadable dead letter: " + err.Error(), Data: data}
		}
		out = append(out, schemas.StoredDeadLetter{DLQSeq: seq, DeadLetter: dl})
		if len(out) == max {
			return ErrStopRead
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bus: dlq: %w", err)
	}
	return out, nil
}

// ErrNoDeadLetter: no dead letter has that sequence.
var ErrNoDeadLetter = errors.New("bus: no such dead letter")

// ErrOriginalGone: a dead letter keeps only a reference to its original
// (schemas.DeadLetter.Truncated), and the original is no longer in its
// stream, so it cannot be replayed.
var ErrOriginalGone = errors.New("bus: the dead letter's original is gone")

// ErrReplayRefused: a dead letter names an original a dead letter cannot
// have (see CheckReplay). Nothing is published; the dead letter stays.
// The error is a *ReplayRefusal.
var ErrReplayRefused = errors.New("bus: dead letter refused")

// ReplayRefusal is a dead letter refused by CheckReplay, with why.
type ReplayRefusal struct{ Reason string }

func (r *ReplayRefusal) Error() string        { return ErrReplayRefused.Error() + ": " + r.Reason }
func (r *ReplayRefusal) Is(target error) bool { return target == ErrReplayRefused }

// CheckReplay says whether dl, stored in the dead-letter stream on
// dlqSubject, may be replayed. Dead letters come only from sample
// requests: a voter drops a request it cannot read (bus.Worker with
// DeadLetters), and a coordinator moves one the voters gave up on
// (coordinator's max-deliveries advisory), both from the samples stream.
// So a dead letter replays only as a sample request of the job its own
// DLQ subject (<ns>.v1.dlq.<tenant>.<job>, where the server stored it)
// names, from the samples stream; whatever its body says otherwise
// (another tenant or job, a $KV., $JS. or _INBOX. subject, another
// namespace's or another service's subject) is refused with
// ErrReplayRefused, whoever replays it: a voter may publish dead letters,
// and a replay publishes with the replaying identity's rights. A payload
// that reads as a sample request must name that job too, and a dead
// letter that keeps no payload has nothing to replay.
func (ns Namespace) CheckReplay(dlqSubject string, dl *schemas.DeadLetter) error {
	refuse := func(format string, args ...any) error {
		return &ReplayRefusal{Reason: fmt.Sprintf(format, args...)}
	}
	tenant, job, ok := ns.dlqJob(dlqSubject)
	if !ok {
		return refuse("it is stored on %q, which is no job's dead-letter subject", dlqSubject)
	}
	if want := ns.SampleSubject(tenant, job); dl.Subject != want {
		return refuse("its original subject %q is not %s, a sample request of %s/%s: dead letters on %s come only from there",
			dl.Subject, want, tenant, job, dlqSubject)
	}
	if dl.Stream != ns.SamplesStream() {
		return refuse("it names stream %q, not %s, where sample requests are", dl.Stream, ns.SamplesStream())
	}
	if len(dl.Data) == 0 {
		return refuse("it keeps no payload to replay (its original was gone when it was dead-lettered)")
	}
	var req schemas.SampleRequest
	if !dl.Truncated && schemas.Decode(dl.Data, &req) == nil && (req.Tenant != tenant || req.JobID != job) {
		return refuse("its payload is a sample request of %s/%s, not of %s/%s", req.Tenant, req.JobID, tenant, job)
	}
	return nil
}

// dlqJob returns the tenant and job of a dead-letter subject of ns
// (<ns>.v1.dlq.<tenant>.<job>).
func (ns Namespace) dlqJob(subject string) (tenant, job string, ok bool) {
	rest, ok := strings.CutPrefix(subject, ns.subject("dlq"))
	if !ok {
		return "", "", false
	}
	tenant, job, ok = strings.Cut(rest, ".")
	if !ok || schemas.ValidTenant(tenant) != nil || schemas.ValidJobID(job) != nil {
		return "", "", false
	}
	return tenant, job, true
}

// ReplayDeadLetter publishes dead letter dlqSeq's original message to its
// original subject again, then removes it from the DLQ. Only what
// CheckReplay allows is replayed: anything else is ErrReplayRefused, with
// nothing published and the dead letter kept. The replay carries
// a message id of its own, so the stream's duplicate window does not drop
// it, and replaying the same dead letter twice publishes it once. A dead
// letter that keeps only a reference has its original read from its
// stream, checked against the size and SHA-256 kept, and replayed;
// ErrOriginalGone when it is not there any more (the dead letter stays).
func ReplayDeadLetter(ctx context.Context, js jetstream.JetStream, ns Namespace, dlqSeq uint64) (schemas.StoredDeadLetter, error) {
	s, err := js.Stream(ctx, ns.DLQStream())
	if err != nil {
		return schemas.StoredDeadLetter{}, fmt.Errorf("bus: dlq: %w", err)
	}
	raw, err := s.GetMsg(ctx, dlqSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return schemas.StoredDeadLetter{}, fmt.Errorf("%w: %d", ErrNoDeadLetter, dlqSeq)
	}
	if err != nil {
		return schemas.StoredDeadLetter{}, fmt.Errorf("bus: dlq: %w", err)
	}
	var dl schemas.DeadLetter
	if err := schemas.Decode(raw.Data, &dl); err != nil {
		return schemas.StoredDeadLetter{}, fmt.Errorf("bus: dead letter %d is unreadable: %w", dlqSeq, err)
	}
	if err := ns.CheckReplay(raw.Subject, &dl); err != nil {
		return schemas.StoredDeadLetter{DLQSeq: dlqSeq, DeadLetter: dl}, fmt.Errorf("replay dead letter %d: %w", dlqSeq, err)
	}
	payload := dl.Data
	if dl.Truncated {
		if payload, err = original(ctx, js, dl); err != nil {
			return schemas.StoredDeadLetter{}, fmt.Errorf("bus: replay dead letter %d: %w", dlqSeq, err)
		}
	}
	msg := &nats.Msg{Subject: dl.Subject, Data: payload, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, "replay/"+ns.DLQStream()+"/"+strconv.FormatUint(dlqSeq, 10))
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return schemas.StoredDeadLetter{}, fmt.Errorf("bus: replay dead letter %d to %s: %w", dlqSeq, dl.Subject, err)
	}
	if err := s.DeleteMsg(ctx, dlqSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return schemas.StoredDeadLetter{}, fmt.Errorf("bus: remove replayed dead letter %d: %w", dlqSeq, err)
	}
	return schemas.StoredDeadLetter{DLQSeq: dlqSeq, DeadLetter: dl}, nil
}

// original reads the whole payload a reference-only dead letter points
// at, from its stream, and checks it is the one the dead letter names.
func original(ctx context.Context, js jetstream.JetStream, dl schemas.DeadLetter) ([]byte, error) {
	gone := func(why string) error {
		return fmt.Errorf("%w: only its first %d of %d bytes (sha256 %s) were kept, and %s %d %s; the head is in `maker dlq list --json`",
			ErrOriginalGone, len(dl.Data), dl.Size, dl.SHA256, dl.Stream, dl.Seq, why)
	}
	s, err := js.Stream(ctx, dl.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, gone("is gone with its stream")
	}
	if err != nil {
		return nil, err
	}
	raw, err := s.GetMsg(ctx, dl.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, gone("no longer holds it")
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw.Data)
	if raw.Subject != dl.Subject || len(raw.Data) != dl.Size || hex.EncodeToString(sum[:]) != dl.SHA256 {
		return nil, gone("holds another message there")
	}
	return raw.Data, nil
}

// DLQReplaySubject is where maker serve asks the coordinators to replay
// dead letters (POST /v1/dlq/replay): the request a
// schemas.DLQReplayBody, the reply a schemas.DLQReplayResult, one
// coordinator answering (queue group QueueCoordinators). A replay
// publishes sample requests, which only coordinators may (the api
// identity may not), so the coordinators run it, with ReplayDeadLetters.
func (ns Namespace) DLQReplaySubject() string { return ns.subject("dlqreplay") + "request" }

// ReplayOutcome is what ReplayDeadLetters did with each dead letter asked,
// in the order asked.
type ReplayOutcome struct {
	// Replayed were published to their original subjects again and
	// removed from the DLQ.
	Replayed []schemas.StoredDeadLetter
	// Refused are those CheckReplay refused, with why: nothing published,
	// the dead letter kept.
	Refused []schemas.DLQReplayProblem
	// Failed could not be replayed for another reason (ErrNoDeadLetter,
	// ErrOriginalGone, the bus).
	Failed []ReplayFailure
}

// Result is the outcome as POST /v1/dlq/replay answers it (every list
// present, a failure's error as its reason).
func (o ReplayOutcome) Result() schemas.DLQReplayResult {
	res := schemas.DLQReplayResult{Replayed: o.Replayed, Refused: o.Refused, Failed: []schemas.DLQReplayProblem{}}
	if res.Replayed == nil {
		res.Replayed = []schemas.StoredDeadLetter{}
	}
	if res.Refused == nil {
		res.Refused = []schemas.DLQReplayProblem{}
	}
	for _, f := range o.Failed {
		res.Failed = append(res.Failed, schemas.DLQReplayProblem{Seq: f.Seq, Reason: f.Err.Error()})
	}
	return res
}

// ReplayFailure is a dead letter that could not be replayed, and why.
type ReplayFailure struct {
	Seq uint64
	Err error
}

// ReplayDeadLetters replays each of seqs with ReplayDeadLetter: a refused
// or failed one stops none of the others (a forged dead letter among them
// stops none of the real ones). maker dlq replay and POST /v1/dlq/replay
// both replay through it, so both apply the same checks. It stops early
// only when ctx ends (the rest are then failed with ctx's error).
func ReplayDeadLetters(ctx context.Context, js jetstream.JetStream, ns Namespace, seqs []uint64) ReplayOutcome {
	var out ReplayOutcome
	for _, seq := range seqs {
		if err := ctx.Err(); err != nil {
			out.Failed = append(out.Failed, ReplayFailure{Seq: seq, Err: err})
			continue
		}
		d, err := ReplayDeadLetter(ctx, js, ns, seq)
		if refusal := (*ReplayRefusal)(nil); errors.As(err, &refusal) {
			out.Refused = append(out.Refused, schemas.DLQReplayProblem{Seq: seq, Reason: refusal.Reason})
			continue
		}
		if err != nil {
			out.Failed = append(out.Failed, ReplayFailure{Seq: seq, Err: err})
			continue
		}
		out.Replayed = append(out.Replayed, d)
	}
	return out
}
