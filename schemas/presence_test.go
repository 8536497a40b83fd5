package schemas_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// A presence record is its writer's claim: one out of its bounds is
// refused, so a reader skips it.
func TestPresenceValidate(t *testing.T) {
	t.Parallel()
	at := time.Unix(1000, 0).UTC()
	voter := func(edit func(p *schemas.VoterPresence)) schemas.Message {
		p := &schemas.VoterPresence{Header: schemas.NewHeader(schemas.KindVoterPresence), ID: "voter-a", Models: []string{"sim-1"},
			Concurrency: 4, InFlight: 4, SamplesAnswered: 10, RedFlags: 10, ProviderErrors: 2, RateLimited: 2, Started: at, At: at}
		edit(p)
		return p
	}
	coord := func(edit func(p *schemas.CoordinatorPresence)) schemas.Message {
		p := &schemas.CoordinatorPresence{Header: schemas.NewHeader(schemas.KindCoordinatorPresence), ID: "c1",
			Jobs:    []schemas.PresenceJob{{Tenant: "acme", ID: "j1", State: "running", Step: 2, InFlight: 3}},
			Tenants: []schemas.TenantInFlight{{Tenant: "acme", Jobs: 1, InFlight: 3}}, Started: at, At: at}
		edit(p)
		return p
	}
	many := func(n int) []string { return strings.Split(strings.Repeat("m,", n-1)+"m", ",") }
	tests := []struct {
		name string
		m    schemas.Message
		msg  string // "" for valid
	}{
		{"voter", voter(func(*schemas.VoterPresence) {}), ""},
		{"voter at the caps", voter(func(p *schemas.VoterPresence) {
			p.Models, p.Deployments = many(schemas.MaxPresenceModels), many(schemas.MaxPresenceModels)
			p.Concurrency, p.SamplesPerS = schemas.MaxPresenceConcurrency, schemas.MaxPresenceRate
		}), ""},
		{"no id", voter(func(p *schemas.VoterPresence) { p.ID = "" }), "id is empty"},
		{"long id", voter(func(p *schemas.VoterPresence) { p.ID = strings.Repeat("x", 129) }), "id is 129 bytes, over 128"},
		{"control in host", voter(func(p *schemas.VoterPresence) { p.Host = "a\x1b[2Jb" }), "host"},
		{"too many models", voter(func(p *schemas.VoterPresence) { p.Models = many(schemas.MaxPresenceModels + 1) }), "at most 32 models"},
		{"zero concurrency", voter(func(p *schemas.VoterPresence) { p.Concurrency = 0 }), "concurrency must be between 1 and 10000"},
		{"in flight over concurrency", voter(func(p *schemas.VoterPresence) { p.InFlight = 5 }), "in_flight must be between 0 and concurrency 4"},
		{"negative counter", voter(func(p *schemas.VoterPresence) { p.Refused = -1 }), "refused must be >= 0"},
		{"red flags over answered", voter(func(p *schemas.VoterPresence) { p.RedFlags = 11 }), "red_flags 11 over samples_answered 10"},
		{"429s over errors", voter(func(p *schemas.VoterPresence) { p.RateLimited = 3 }), "rate_limited 3 over provider_errors 2"},
		{"NaN rate", voter(func(p *schemas.VoterPresence) { p.SamplesPerS = math.NaN() }), "samples_per_s"},
		{"infinite rate", voter(func(p *schemas.VoterPresence) { p.SamplesPerS = math.Inf(1) }), "samples_per_s"},
		{"at before started", voter(func(p *schemas.VoterPresence) { p.At = at.Add(-time.Second) }), "at not before started"},
		{"no times", voter(func(p *schemas.VoterPresence) { p.Started, p.At = time.Time{}, time.Time{} }), "started and at must be set"},
		{"wrong kind", voter(func(p *schemas.VoterPresence) { p.Kind = schemas.KindCoordinatorPresence }), "want \"voter_presence\""},
		{"coordinator", coord(func(*schemas.CoordinatorPresence) {}), ""},
		{"bad tenant", coord(func(p *schemas.CoordinatorPresence) { p.Jobs[0].Tenant = "Acme Corp" }), "tenant"},
		{"bad job id", coord(func(p *schemas.CoordinatorPresence) { p.Jobs[0].ID = "a/b" }), "job id"},
		{"long state", coord(func(p *schemas.CoordinatorPresence) { p.Jobs[0].State = strings.Repeat("s", 33) }), "state is 33 bytes"},
		{"negative step", coord(func(p *schemas.CoordinatorPresence) { p.Jobs[0].Step = -1 }), "step and in_flight must be between 0"},
		{"huge in flight", coord(func(p *schemas.CoordinatorPresence) { p.Tenants[0].InFlight = 1 << 31 }), "jobs and in_flight must be between 0"},
		{"too many jobs", coord(func(p *schemas.CoordinatorPresence) {
			p.Jobs = make([]schemas.PresenceJob, schemas.MaxPresenceJobs+1)
		}), "at most 200 jobs"},
		{"negative jobs_more", coord(func(p *schemas.CoordinatorPresence) { p.JobsMore = -1 }), "jobs_more must be between 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.m.Validate()
			switch {
			case tc.msg == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.msg == "":
			case err == nil:
				t.Fatalf("accepted, want %q", tc.msg)
			case !strings.Contains(err.Error(), tc.msg):
				t.Fatalf("error %q, want %q", err, tc.msg)
			case !errors.Is(err, schemas.ErrInvalid) && !errors.Is(err, schemas.ErrKind):
				t.Fatalf("error %v is neither ErrInvalid nor ErrKind", err)
			}
		})
	}
}

// A key token is one NATS subject token of safe bytes, whatever the id.
func TestPresenceKey(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"voter-host-12": "voter.voter-host-12", "host.example.com-1": "voter.host_example_com-1",
		"a b*>c": "voter.a_b__c", "é": "voter._",
	} {
		if got := schemas.PresenceKey("voter", id); got != want {
			t.Errorf("PresenceKey(voter, %q) = %q, want %q", id, got, want)
		}
	}
}
