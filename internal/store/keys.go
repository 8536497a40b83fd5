package store

// Every key of a job shares the hash tag {tenant/job}, so a job's scripts
// touch one Redis Cluster slot. With the default prefix "maker":
//
//	maker:{tenant/job}:step   hash  the open step: step, epoch, counters, last decision
//	maker:{tenant/job}:slots  hash  sample index -> answer, for the open step
//	maker:{tenant/job}:tally  hash  vote key -> valid votes, for the open step
//
// and one key of the fleet's (secret.go):
//
//	maker:secrets             hash  sample_key -> the coordinators' key of sample capabilities

// DefaultKeyPrefix starts every key unless Config.KeyPrefix says otherwise.
const DefaultKeyPrefix = "maker"

// JobRef names a job.
type JobRef struct {
	Tenant string
	JobID  string
}

func (j JobRef) tag() string { return "{" + j.Tenant + "/" + j.JobID + "}" }

// failuresKey counts a job's failed attempts; it outlives DeleteJob, which
// every fresh attempt runs.
func (j JobRef) failuresKey(prefix string) string { return prefix + ":" + j.tag() + ":failures" }

// keys returns the step, slots and tally keys, the KEYS of every script.
func (j JobRef) keys(prefix string) []string {
	t := prefix + ":" + j.tag()
	return []string{t + ":step", t + ":slots", t + ":tally"}
}
