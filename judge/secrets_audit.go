package judge

import "github.com/makerfleet/makerfleet/schemas"

// redactAudit removes every secret from an audit record before it is
// stored: the audit stream is read by people and by later requests of the
// session (as history), so it must hold no credential the guard would
// withhold from a model. The problem and diagnosis are also cut to
// maxAuditText bytes (after redaction, so no half secret survives the
// cut).
func redactAudit(rec *schemas.BreakGlassAudit) {
	rec.Problem = clip(Redact(rec.Problem), maxAuditText)
	rec.Diagnosis = clip(Redact(rec.Diagnosis), maxAuditText)
	rec.Reason = Redact(rec.Reason)
	rec.Requester = Redact(rec.Requester)
	rec.Approver = Redact(rec.Approver)
	if len(rec.ExcludedFiles) > 0 {
		// A file name can be the secret (a token saved as a file name).
		xs := make([]schemas.ExcludedFile, len(rec.ExcludedFiles))
		for i, x := range rec.ExcludedFiles {
			xs[i] = schemas.ExcludedFile{Path: Redact(x.Path), Reason: Redact(x.Reason)}
		}
		rec.ExcludedFiles = xs
	}
}
