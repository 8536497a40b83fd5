package auth

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/throttle"
)

// ErrReply: a request's reply subject is not the inbox of an identity
// that may have sent it. The request is neither answered nor acted on.
var ErrReply = errors.New("auth: reply refused")

// MayPublish reports whether p lets its identity publish on subject (a
// literal subject): an Allow rule matches it and no Deny rule does, as
// the NATS server decides.
func (p Permissions) MayPublish(subject string) bool {
	match := func(rules []string) bool {
		return slices.ContainsFunc(rules, func(r string) bool { return subjectMatches(r, subject) })
	}
	return match(p.Publish.Allow) && !match(p.Publish.Deny)
}

// subjectMatches reports whether a NATS subject filter ("a.*.c", "a.>")
// matches a literal subject.
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		switch {
		case f == ">":
			return i < len(st)
		case i >= len(st):
			return false
		case f != "*" && f != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}

// CheckReply says whether a service of namespace ns may answer a request
// received on subject at reply. Every identity reads its replies under
// _INBOX.<identity> and nowhere else (bus.Auth sets the prefix), and the
// server checks who publishes a request but not the reply subject it
// names: so on a secured fleet the reply must be under the inbox of an
// identity whose permissions (PermissionsOf, the rules auth.conf holds)
// let it publish on subject, the one who could have sent it. Otherwise the
// answer would go to another identity's inbox, where a request forged by
// someone else could have it wait, read or be fooled by it. secured is
// whether the service's own connection has an identity (ConnSecured); a
// fleet without identities takes any literal inbox (bus.InboxReply).
// ErrReply when it may not.
func CheckReply(ns bus.Namespace, secured bool, subject, reply string) error {
	if !bus.InboxReply(reply) {
		return fmt.Errorf("%w: reply subject %q is not an inbox", ErrReply, reply)
	}
	if !secured {
		return nil
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(reply, nats.InboxPrefix), ".")
	if ValidIdentity(id) != nil {
		return fmt.Errorf("%w: reply subject %q is no identity's inbox (_INBOX.<identity>.…)", ErrReply, reply)
	}
	p, err := PermissionsOf(ns, id)
	if err != nil || !p.MayPublish(subject) {
		return fmt.Errorf("%w: reply subject %q is the inbox of %s, which may not publish on %s", ErrReply, reply, id, subject)
	}
	return nil
}

// ConnSecured reports whether nc connects as an identity: its replies come
// under _INBOX.<identity> (bus.Auth), not the default inbox prefix.
func ConnSecured(nc *nats.Conn) bool {
	prefix := strings.TrimSuffix(nc.Opts.InboxPrefix, ".")
	return prefix != "" && prefix != strings.TrimSuffix(nats.InboxPrefix, ".")
}

// replyLogEvery spaces the log lines of refused replies.
const replyLogEvery = time.Second

// ReplyGuard is CheckReply for one service's connection: it counts the
// requests it refuses and logs them at most once a second (a flood of
// forged requests is counted in full, not logged in full).
type ReplyGuard struct {
	ns      bus.Namespace
	secured bool
	log     *slog.Logger
	refused atomic.Int64
	every   throttle.Every
}

// NewReplyGuard returns the guard of the service on nc in namespace ns,
// logging to log.
func NewReplyGuard(nc *nats.Conn, ns bus.Namespace, log *slog.Logger) *ReplyGuard {
	return &ReplyGuard{ns: ns, secured: ConnSecured(nc), log: log, every: throttle.Every{Interval: replyLogEvery}}
}

// Allow reports whether m may be answered (and acted on); a refused one is
// counted and, at most once a second, logged at WARN with what refused it.
func (g *ReplyGuard) Allow(m *nats.Msg) bool {
	err := CheckReply(g.ns, g.secured, m.Subject, m.Reply)
	if err == nil {
		return true
	}
	n := g.refused.Add(1)
	if g.every.Allow() {
		g.log.Warn("request refused unanswered and undone: its reply subject is not its sender's inbox",
			"subject", m.Subject, "reply", m.Reply, "err", err, "refused_so_far", n)
	}
	return false
}

// Refused is how many requests the guard refused.
func (g *ReplyGuard) Refused() int64 { return g.refused.Load() }
