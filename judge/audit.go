package judge

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/schemas"
)

// maxAuditText bounds the problem and diagnosis kept in an audit record.
const maxAuditText = 2000

// appendAudit publishes one audit record; the message id (tenant, request
// id and outcome) makes a redelivered request's record a duplicate the
// stream drops, and no other tenant's.
func appendAudit(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, rec *schemas.BreakGlassAudit) error {
	rec.Header = schemas.NewHeader(schemas.KindBreakGlassAudit)
	redactAudit(rec) // the audit stream never stores a secret
	if rec.At.IsZero() {
		rec.At = time.Now().UTC()
	}
	data, err := schemas.Encode(rec)
	if err != nil {
		return fmt.Errorf("judge: audit record: %w", err)
	}
	if _, err := js.Publish(ctx, ns.JudgeAuditSubject(rec.Tenant, rec.Session), data,
		jetstream.WithMsgID(rec.Tenant+"."+rec.RequestID+"."+rec.Outcome)); err != nil {
		return fmt.Errorf("judge: append audit: %w", err)
	}
	return nil
}

// ListAudit returns the audit records of tenant and session in the order
// they were written; an empty tenant or session means all.
func ListAudit(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, tenant, session string) ([]schemas.BreakGlassAudit, error) {
	out := []schemas.BreakGlassAudit{} // "[]", not "null", in JSON
	err := bus.ReadOrdered(ctx, js, bus.ReadRange{Stream: ns.JudgeAuditStream(), Subjects: []string{ns.JudgeAuditFilter(tenant, session)}},
		func(_ uint64, data []byte) error {
			var rec schemas.BreakGlassAudit
			if err := schemas.Decode(data, &rec); err != nil {
				return nil // unreadable records are skipped, not fatal
			}
			out = append(out, rec)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("judge: read audit: %w", err)
	}
	return out, nil
}

// redactAudit removes every secret from an audit record before it is
// stored: the audit stream is read by people and by later requests of the
// session (as history), so it must hold no credential the guard would
// withhold from a model. The problem and diagnosis are also cut to
// maxAuditText bytes (after redaction, so no half secret survives the
// cut).
func redactAudit(rec *schemas.BreakGlassAudit) {
	rec.Problem = clip(guard.Redact(rec.Problem), maxAuditText)
	rec.Diagnosis = clip(guard.Redact(rec.Diagnosis), maxAuditText)
	rec.Reason = guard.Redact(rec.Reason)
	rec.Requester = guard.Redact(rec.Requester)
	rec.Approver = guard.Redact(rec.Approver)
	if len(rec.ExcludedFiles) > 0 {
		// A file name can be the secret (a token saved as a file name).
		xs := make([]schemas.ExcludedFile, len(rec.ExcludedFiles))
		for i, x := range rec.ExcludedFiles {
			xs[i] = schemas.ExcludedFile{Path: guard.Redact(x.Path), Reason: guard.Redact(x.Reason)}
		}
		rec.ExcludedFiles = xs
	}
}
