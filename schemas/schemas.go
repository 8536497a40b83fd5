// Package schemas holds every message makerfleet puts on the wire, as plain
// JSON-tagged Go types.
//
// Each message carries a version and a stable kind name. Field names are
// snake_case. JSON Schema files in jsonschema/ are generated from these types
// (`make generate`); a test fails when they drift. Golden example messages
// live in testdata/.
//
// Decode reads one message strictly: it checks the kind and the version and
// runs the type's Validate method, so a consumer never acts on a malformed
// message. Keys are case-sensitive and may not repeat, unlike plain
// encoding/json, so Decode reads a message the way the JSON Schema and
// parsers in other languages do.
//
// No number on the wire is negative, except seeds.
package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"unicode/utf8"
)

// Version is the wire version every message carries. A reader rejects
// messages of another version with ErrVersion.
const Version = 1

// Message kinds.
const (
	KindJobSpec       = "job_spec"
	KindSampleRequest = "sample_request"
	KindSampleResult  = "sample_result"
	KindStepDecided   = "step_decided"
	KindJobStatus     = "job_status"
	KindJobReport     = "job_report"
	KindJobRecord     = "job_record"
	KindLease         = "lease"
	KindJournalEntry  = "journal_entry"
	KindCheckpoint    = "checkpoint"
	KindDeadLetter    = "dead_letter"
	KindTaskRecord    = "task_record"
)

// DefaultTenant is the tenant of a job that names none.
const DefaultTenant = "default"

// Sentinel errors.
var (
	ErrInvalid = errors.New("schemas: invalid message")
	ErrVersion = errors.New("schemas: unsupported version")
	ErrKind    = errors.New("schemas: wrong kind")
)

// MaxMessageBytes bounds every message we decode; larger ones are rejected
// before parsing.
const MaxMessageBytes = 1 << 20

// The identifiers' rules as regexps, as the JSON Schemas state them.
const (
	TenantPattern = `^[a-z0-9][a-z0-9-]{0,31}$`
	JobIDPattern  = `^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`
	// TaskPattern names built-in tasks and task specs alike.
	TaskPattern = `^[a-z][a-z0-9_-]{0,31}$`
	// TaskSpecVersionPattern is a task spec's version.
	TaskSpecVersionPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$`
	// RedFlagNamePattern names a red flag (a spec's checks included).
	RedFlagNamePattern = `^[a-z][a-z0-9_]{0,39}$`
	// TaskHashPattern is a task spec's content hash.
	TaskHashPattern = `^sha256:[0-9a-f]{64}$`
)

var (
	tenantRE = regexp.MustCompile(TenantPattern)
	jobIDRE  = regexp.MustCompile(JobIDPattern)
	taskRE   = regexp.MustCompile(TaskPattern)
)

// TenantRule and JobIDRule say what ValidTenant and ValidJobID accept, for
// messages to people.
const (
	TenantRule = "1-32 characters of a-z, 0-9 and '-', starting with a letter or digit"
	JobIDRule  = "1-64 characters of A-Z, a-z, 0-9, '_' and '-', starting with a letter or digit"
)

// ValidTenant checks a tenant id (TenantRule). Tenants appear in subjects,
// consumer names and keys.
func ValidTenant(t string) error {
	if !tenantRE.MatchString(t) {
		return fmt.Errorf("%w: tenant %q must be %s", ErrInvalid, t, TenantRule)
	}
	return nil
}

// ValidJobID checks a job id (JobIDRule).
func ValidJobID(id string) error {
	if !jobIDRE.MatchString(id) {
		return fmt.Errorf("%w: job id %q must be %s", ErrInvalid, id, JobIDRule)
	}
	return nil
}

// Header is the part every message shares.
type Header struct {
	// Version is the wire version, always Version (1).
	Version int `json:"version"`
	// Kind is the stable message kind name.
	Kind string `json:"kind"`
}

func (h Header) check(kind string) error {
	if h.Kind != kind {
		return fmt.Errorf("%w: got %q, want %q", ErrKind, h.Kind, kind)
	}
	if h.Version != Version {
		return fmt.Errorf("%w: %d (this build reads version %d)", ErrVersion, h.Version, Version)
	}
	return nil
}

// checkJob checks the header of a message of the given kind and the
// tenant and job id it names.
func (h Header) checkJob(kind, tenant, job string) error {
	if err := h.check(kind); err != nil {
		return err
	}
	if err := ValidTenant(tenant); err != nil {
		return err
	}
	return ValidJobID(job)
}

// Message is implemented by every wire type.
type Message interface {
	// MessageKind returns the kind name.
	MessageKind() string
	// Validate checks the fields.
	Validate() error
}

// NewHeader returns a header for kind at the current version.
func NewHeader(kind string) Header { return Header{Version: Version, Kind: kind} }

// Decode strictly decodes data into m: size limit, UTF-8, known fields only
// (matched case-sensitively, none repeated), one JSON value, right kind and
// version, valid fields. The sample messages are read without reflection
// (samplecodec.go), to the same values and errors.
func Decode(data []byte, m Message) error { return decode(data, m, true) }

// decode is Decode, by reflection alone unless fast.
func decode(data []byte, m Message, fast bool) error {
	if len(data) > MaxMessageBytes {
		return fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrInvalid, len(data), MaxMessageBytes)
	}
	if !utf8.Valid(data) {
		return fmt.Errorf("%w: %s: not UTF-8", ErrInvalid, m.MessageKind())
	}
	if fast {
		if done, err := decodeFast(data, m); done {
			return err
		}
	}
	// One strict decode; only when it fails is the header read on its own,
	// so a wrong kind or version is reported as such, not as a bad field.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		var h Header
		if herr := json.Unmarshal(data, &h); herr != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, herr)
		}
		if herr := h.check(m.MessageKind()); herr != nil {
			return herr
		}
		return fmt.Errorf("%w: %s: %v", ErrInvalid, m.MessageKind(), err)
	}
	if len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) != 0 {
		return fmt.Errorf("%w: %s: trailing data", ErrInvalid, m.MessageKind())
	}
	if err := checkKeys(data, reflect.TypeOf(m)); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, m.MessageKind(), err)
	}
	return m.Validate()
}

// Encode validates m and returns its JSON. The sample messages and the
// journal entry are written without reflection (samplecodec.go,
// journalcodec.go), byte for byte as json.Marshal writes them.
func Encode(m Message) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if data, ok, err := encodeFast(m); ok {
		return data, err
	}
	return json.Marshal(m)
}

func invalid(kind, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, kind, fmt.Sprintf(format, args...))
}

// count is a named wire number that may not be negative.
type count struct {
	name string
	v    int64
}

// nonNegative reports the first negative count.
func nonNegative(kind string, cs ...count) error { return nonNegativeIn(kind, "", cs...) }

// nonNegativeIn reports the first negative count, named under prefix.
func nonNegativeIn(kind, prefix string, cs ...count) error {
	for _, c := range cs {
		if c.v < 0 {
			return invalid(kind, "%s%s must be >= 0, got %d", prefix, c.name, c.v)
		}
	}
	return nil
}

// figure is a named wire float that must be finite and not negative:
// encoding/json cannot write NaN or ±Inf, so catching them here gives a
// clear error instead of a marshal failure.
type figure struct {
	name string
	v    float64
}

func nonNegativeFigures(kind string, fs ...figure) error {
	for _, f := range fs {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return invalid(kind, "%s must be a finite number >= 0, got %v", f.name, f.v)
		}
	}
	return nil
}

func checkTally(kind string, tally []TallyEntry) error {
	for i, e := range tally {
		if e.Votes < 0 {
			return invalid(kind, "tally[%d].votes must be >= 0, got %d", i, e.Votes)
		}
	}
	return nil
}
