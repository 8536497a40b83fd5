package batch

import (
	"errors"
	"fmt"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// Records are owned by where they live. A batch's record is stored under
// <tenant>.<batch> and its lines on <ns>.v1.batch.<tenant>.<batch>: the key
// and the subject say whose batch it is (the NATS server decides who may
// write them), never the record's or a line's body. A record whose body
// names another tenant or batch, or counts other lines than are stored on
// its subject, is refused: not fed, not counted in anyone's share, no
// lease or job written for the tenant it names, counted
// (maker_records_refused_total, Runner.Refused) once per revision and
// logged at most every RunnerConfig.RefusedLogEvery.

// errRefused: a batch record (or its lines) disagrees with where it is
// stored. The error is a *refusal.
var errRefused = errors.New("batch record refused")

// Why a record is refused: the metric's reason label.
const (
	refusedTenant  = "tenant"   // the body names another tenant than its key
	refusedBatchID = "batch_id" // the body names another batch than its key
	refusedKey     = "key"      // the key names no batch (<tenant>.<batch>)
	refusedLines   = "lines"    // counts.total differs from the lines stored
	refusedLine    = "line"     // a stored line names another batch
)

// refusal is a record refused, with why.
type refusal struct {
	reason, detail string
	rev            uint64 // the record's revision refused (0: unknown)
}

func (r *refusal) Error() string        { return errRefused.Error() + ": " + r.detail }
func (r *refusal) Is(target error) bool { return target == errRefused }

// recordRef is the tenant and batch of a record key <tenant>.<batch>; ok
// is false for a key that names no batch (tenant is then the key's first
// part when it is a tenant, else "").
func recordRef(key string) (tenant, id string, ok bool) {
	tenant, id, ok = bus.SplitJobKey(key)
	if !ok {
		return "", "", false
	}
	return tenant, id, schemas.ValidBatchID(id) == nil
}

// foreign is the refusal of rec, stored under tenant/id's key, when its
// body names another tenant or batch; nil when it is that batch's.
func foreign(tenant, id string, rec *schemas.BatchRecord, rev uint64) *refusal {
	switch {
	case rec.Tenant != tenant:
		return &refusal{reason: refusedTenant, rev: rev,
			detail: fmt.Sprintf("the record under %s names tenant %q", recordKey(tenant, id), rec.Tenant)}
	case rec.ID != id:
		return &refusal{reason: refusedBatchID, rev: rev,
			detail: fmt.Sprintf("the record under %s names batch %q", recordKey(tenant, id), rec.ID)}
	}
	return nil
}
