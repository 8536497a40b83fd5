package schemas

import (
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Presence records: each voter and each coordinator puts one, every few
// seconds, into the fleet's presence bucket (maker_presence, keys
// voter.<id> and coordinator.<id>), which forgets a record its writer
// stopped renewing. They feed the fleet view (GET /v1/fleet, maker fleet)
// and nothing else: a record is its writer's claim, informational only,
// never used for a decision. Readers decode them strictly and skip any
// that is invalid or oversized.

// KindVoterPresence and KindCoordinatorPresence are the kinds of the
// presence records.
const (
	KindVoterPresence       = "voter_presence"
	KindCoordinatorPresence = "coordinator_presence"
)

// Bounds of a presence record: a writer caps its lists (saying how many
// it left out), and a reader refuses a record over them.
const (
	// MaxPresenceBytes bounds one record's JSON; the bucket refuses
	// larger values.
	MaxPresenceBytes = 64 << 10
	// MaxPresenceModels bounds a voter's models and deployments.
	MaxPresenceModels = 32
	// MaxPresenceJobs bounds the jobs a coordinator record lists.
	MaxPresenceJobs = 200
	// MaxPresenceTenants bounds the tenants a coordinator record lists.
	MaxPresenceTenants = 100
	// MaxPresenceConcurrency bounds a voter's concurrency (the voter's
	// own configuration bound).
	MaxPresenceConcurrency = 10_000
	// MaxPresenceRate bounds a voter's samples per second.
	MaxPresenceRate = 1e6
	// maxPresenceCount bounds a coordinator's jobs and samples in
	// flight, so that sums over every record cannot overflow.
	maxPresenceCount = 1 << 30
	// maxPresenceText bounds an id, host or build.
	maxPresenceText = 128
)

// VoterPresence is a voter's presence record (key voter.<id>): who it is,
// what it serves, how busy it is and its counters since it started.
type VoterPresence struct {
	Header
	// ID is the voter's instance id (maker voter --id; default
	// voter-host-pid): 1 to 128 bytes of printable UTF-8. Its key is
	// voter.<PresenceKeyToken(id)>.
	ID string `json:"id"`
	// Host is the voter's host name (at most 128 bytes).
	Host string `json:"host,omitempty"`
	// Build is the voter's release (maker --version; at most 128 bytes).
	Build string `json:"build,omitempty"`
	// Models are the models it answers: its own (--model) first, then
	// those its policy allows besides (--allow-model); at most
	// MaxPresenceModels.
	Models []string `json:"models"`
	// Deployments are the provider deployments it calls (maker
	// providers), when it calls deployments rather than one server; at
	// most MaxPresenceModels.
	Deployments []string `json:"deployments,omitempty"`
	// Concurrency is how many samples it works on at once: 1 to
	// MaxPresenceConcurrency.
	Concurrency int `json:"concurrency" jsonschema:"minimum=1,maximum=10000"`
	// InFlight is how many samples it was working on when it wrote the
	// record: 0 to Concurrency.
	InFlight int `json:"in_flight" jsonschema:"minimum=0"`
	// SamplesAnswered counts the sample results it published since it
	// started (votes, red flags, skipped, cancelled).
	SamplesAnswered int64 `json:"samples_answered" jsonschema:"minimum=0"`
	// RedFlags counts the results it published as red flags since it
	// started.
	RedFlags int64 `json:"red_flags" jsonschema:"minimum=0"`
	// ProviderErrors counts the failed model call attempts (retried ones
	// included) since it started: the sum of maker_model_errors_total but
	// no_usage.
	ProviderErrors int64 `json:"provider_errors" jsonschema:"minimum=0"`
	// RateLimited counts the attempts among ProviderErrors the provider
	// answered 429 (maker_model_errors_total{code="429"}).
	RateLimited int64 `json:"rate_limited" jsonschema:"minimum=0"`
	// Refused counts the requests it refused without serving them since
	// it started: its policy's refusals and the samples it handed back
	// because the provider refused the key or the model.
	Refused int64 `json:"refused" jsonschema:"minimum=0"`
	// SamplesPerS is its rate of published results between its previous
	// record and this one (0 in its first record): finite, 0 to
	// MaxPresenceRate.
	SamplesPerS float64 `json:"samples_per_s" jsonschema:"minimum=0,maximum=1000000"`
	// Started is when it started; At when it wrote this record (not
	// before Started).
	Started time.Time `json:"started"`
	At      time.Time `json:"at"`
}

// MessageKind implements Message.
func (*VoterPresence) MessageKind() string { return KindVoterPresence }

// Validate implements Message.
func (p *VoterPresence) Validate() error {
	const k = KindVoterPresence
	if err := p.Header.check(k); err != nil {
		return err
	}
	if err := checkPresenceID(k, p.ID, p.Host, p.Build); err != nil {
		return err
	}
	if len(p.Models) > MaxPresenceModels || len(p.Deployments) > MaxPresenceModels {
		return invalid(k, "at most %d models and %d deployments, got %d and %d", MaxPresenceModels, MaxPresenceModels, len(p.Models), len(p.Deployments))
	}
	for _, m := range append(append([]string(nil), p.Models...), p.Deployments...) {
		if err := checkPresenceText(k, "model or deployment", m, maxModelName); err != nil {
			return err
		}
	}
	if p.Concurrency < 1 || p.Concurrency > MaxPresenceConcurrency {
		return invalid(k, "concurrency must be between 1 and %d, got %d", MaxPresenceConcurrency, p.Concurrency)
	}
	if p.InFlight < 0 || p.InFlight > p.Concurrency {
		return invalid(k, "in_flight must be between 0 and concurrency %d, got %d", p.Concurrency, p.InFlight)
	}
	if err := nonNegative(k, count{"samples_answered", p.SamplesAnswered}, count{"red_flags", p.RedFlags},
		count{"provider_errors", p.ProviderErrors}, count{"rate_limited", p.RateLimited}, count{"refused", p.Refused}); err != nil {
		return err
	}
	if p.RedFlags > p.SamplesAnswered || p.RateLimited > p.ProviderErrors {
		return invalid(k, "red_flags %d over samples_answered %d, or rate_limited %d over provider_errors %d",
			p.RedFlags, p.SamplesAnswered, p.RateLimited, p.ProviderErrors)
	}
	if math.IsNaN(p.SamplesPerS) || !inRange(p.SamplesPerS, 0, MaxPresenceRate) {
		return invalid(k, "samples_per_s must be between 0 and %g, got %v", MaxPresenceRate, p.SamplesPerS)
	}
	return checkPresenceTimes(k, p.Started, p.At)
}

// CoordinatorPresence is a coordinator's presence record (key
// coordinator.<id>): who it is and the jobs it runs now.
type CoordinatorPresence struct {
	Header
	// ID is the coordinator's instance id: 1 to 128 bytes of printable
	// UTF-8. Its key is coordinator.<PresenceKeyToken(id)>.
	ID string `json:"id"`
	// Host is the coordinator's host name (at most 128 bytes).
	Host string `json:"host,omitempty"`
	// Build is the coordinator's release (maker --version; at most 128
	// bytes).
	Build string `json:"build,omitempty"`
	// Jobs are the jobs it runs now, by tenant and id; at most
	// MaxPresenceJobs (JobsMore counts those left out).
	Jobs []PresenceJob `json:"jobs"`
	// JobsMore counts the jobs it runs beyond those listed.
	JobsMore int `json:"jobs_more,omitempty" jsonschema:"minimum=0"`
	// Tenants are its running jobs and samples in flight, by tenant; at
	// most MaxPresenceTenants.
	Tenants []TenantInFlight `json:"tenants"`
	// Started is when it started; At when it wrote this record (not
	// before Started).
	Started time.Time `json:"started"`
	At      time.Time `json:"at"`
}

// PresenceJob is one job a coordinator runs.
type PresenceJob struct {
	// Tenant and ID name the job.
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	// State is the job's state as its status says (running, paused, ...):
	// at most 32 bytes.
	State string `json:"state"`
	// Step is the step it is deciding (0-based).
	Step int64 `json:"step" jsonschema:"minimum=0"`
	// InFlight is how many of its samples are requested and not yet
	// answered.
	InFlight int `json:"in_flight" jsonschema:"minimum=0"`
}

// TenantInFlight is one tenant's running jobs and samples in flight.
type TenantInFlight struct {
	// Tenant names the tenant.
	Tenant string `json:"tenant"`
	// Jobs counts its running jobs.
	Jobs int `json:"jobs" jsonschema:"minimum=0"`
	// InFlight counts its samples requested and not yet answered.
	InFlight int `json:"in_flight" jsonschema:"minimum=0"`
}

// MessageKind implements Message.
func (*CoordinatorPresence) MessageKind() string { return KindCoordinatorPresence }

// Validate implements Message.
func (p *CoordinatorPresence) Validate() error {
	const k = KindCoordinatorPresence
	if err := p.Header.check(k); err != nil {
		return err
	}
	if err := checkPresenceID(k, p.ID, p.Host, p.Build); err != nil {
		return err
	}
	if len(p.Jobs) > MaxPresenceJobs || len(p.Tenants) > MaxPresenceTenants {
		return invalid(k, "at most %d jobs and %d tenants, got %d and %d", MaxPresenceJobs, MaxPresenceTenants, len(p.Jobs), len(p.Tenants))
	}
	if p.JobsMore < 0 || p.JobsMore > maxPresenceCount {
		return invalid(k, "jobs_more must be between 0 and %d, got %d", maxPresenceCount, p.JobsMore)
	}
	for _, j := range p.Jobs {
		if err := ValidTenant(j.Tenant); err != nil {
			return err
		}
		if err := ValidJobID(j.ID); err != nil {
			return err
		}
		if err := checkPresenceText(k, "state", j.State, 32); err != nil {
			return err
		}
		if j.Step < 0 || j.InFlight < 0 || j.InFlight > maxPresenceCount {
			return invalid(k, "job %s/%s: step and in_flight must be between 0 and %d", j.Tenant, j.ID, maxPresenceCount)
		}
	}
	for _, t := range p.Tenants {
		if err := ValidTenant(t.Tenant); err != nil {
			return err
		}
		if t.Jobs < 0 || t.InFlight < 0 || t.Jobs > maxPresenceCount || t.InFlight > maxPresenceCount {
			return invalid(k, "tenant %s: jobs and in_flight must be between 0 and %d", t.Tenant, maxPresenceCount)
		}
	}
	return checkPresenceTimes(k, p.Started, p.At)
}

// PresenceKey is the presence bucket key of a record of role ("voter" or
// "coordinator") whose writer is id.
func PresenceKey(role, id string) string { return role + "." + PresenceKeyToken(id) }

// PresenceKeyToken is id as one key token: every character outside
// [A-Za-z0-9_-] becomes '_'.
func PresenceKeyToken(id string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, id)
}

func checkPresenceID(k, id, host, build string) error {
	if id == "" {
		return invalid(k, "id is empty")
	}
	if err := checkPresenceText(k, "id", id, maxPresenceText); err != nil {
		return err
	}
	if err := checkPresenceText(k, "host", host, maxPresenceText); err != nil {
		return err
	}
	return checkPresenceText(k, "build", build, maxPresenceText)
}

// checkPresenceText checks a short text: at most max bytes of UTF-8
// without control characters.
func checkPresenceText(k, what, s string, max int) error {
	switch {
	case len(s) > max:
		return invalid(k, "%s is %d bytes, over %d", what, len(s), max)
	case !utf8.ValidString(s):
		return invalid(k, "%s is not UTF-8", what)
	case strings.ContainsFunc(s, unicode.IsControl):
		return invalid(k, "%s %q holds a control character", what, s)
	}
	return nil
}

func checkPresenceTimes(k string, started, at time.Time) error {
	if started.IsZero() || at.IsZero() || at.Before(started) {
		return invalid(k, "started and at must be set, at not before started")
	}
	return nil
}

// FleetView is the fleet as GET /v1/fleet (admin keys) and maker fleet
// show it: the live voters and coordinators (from their presence
// records, each its writer's claim), the work queues' lag (from
// JetStream's consumer and stream info), and totals.
type FleetView struct {
	// At is when the view was read.
	At time.Time `json:"at"`
	// Voters are the voters whose presence record is live, by id.
	Voters []VoterPresence `json:"voters"`
	// Coordinators are the coordinators whose presence record is live,
	// by id.
	Coordinators []CoordinatorPresence `json:"coordinators"`
	// Queues are the fleet's work queues: jobs waiting for a coordinator,
	// sample requests waiting for a voter, results waiting for their
	// coordinator.
	Queues []QueueView `json:"queues"`
	// Totals sum the live records.
	Totals FleetTotals `json:"totals"`
	// Tenants are the running jobs and samples in flight by tenant,
	// summed over the coordinators' records, by tenant.
	Tenants []TenantInFlight `json:"tenants"`
	// Skipped counts the presence records left out: invalid, oversized,
	// under a key that is not their writer's, or older than the bucket's
	// TTL.
	Skipped int `json:"skipped"`
}

// QueueView is one work queue's state, from JetStream.
type QueueView struct {
	// Name is what the queue holds: jobs, samples or results.
	Name string `json:"name"`
	// Stream is the JetStream stream; Consumer its shared durable
	// consumer ("" for results, which each job reads through its own).
	Stream   string `json:"stream"`
	Consumer string `json:"consumer,omitempty"`
	// Messages is how many messages the stream holds: those not yet
	// delivered plus those delivered and not yet acked (a work queue
	// drops a message once acked).
	Messages uint64 `json:"messages"`
	// NumPending is the lag: messages not yet delivered to the consumer
	// (for results: Messages).
	NumPending uint64 `json:"num_pending"`
	// AckPending is how many are delivered and not yet acked: in a
	// voter's (or coordinator's) hands.
	AckPending int `json:"ack_pending"`
	// Redelivered is how many of those were delivered more than once.
	Redelivered int `json:"redelivered"`
	// Waiting is how many pull requests wait for a message: idle
	// capacity.
	Waiting int `json:"waiting"`
	// Consumers is how many consumers the stream has.
	Consumers int `json:"consumers"`
}

// FleetTotals sum a fleet view's live presence records.
type FleetTotals struct {
	// Voters and Coordinators count the live records.
	Voters       int `json:"voters"`
	Coordinators int `json:"coordinators"`
	// Concurrency and InFlight sum the voters'.
	Concurrency int `json:"concurrency"`
	InFlight    int `json:"in_flight"`
	// SamplesPerS sums the voters' rates, each computed by its voter from
	// its samples_answered counter between its last two records.
	SamplesPerS float64 `json:"samples_per_s"`
	// SamplesAnswered, RedFlags, ProviderErrors, RateLimited and Refused
	// sum the voters' counters since each started.
	SamplesAnswered int64 `json:"samples_answered"`
	RedFlags        int64 `json:"red_flags"`
	ProviderErrors  int64 `json:"provider_errors"`
	RateLimited     int64 `json:"rate_limited"`
	Refused         int64 `json:"refused"`
	// Jobs counts the jobs the coordinators run.
	Jobs int `json:"jobs"`
}
