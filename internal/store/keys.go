package store

// Every key of a job shares the hash tag {tenant/job}, so a job's scripts
// touch one Redis Cluster slot.
//
//	maker:{tenant/job}:step   hash  the open step: step, epoch, counters, last decision
//	maker:{tenant/job}:slots  hash  sample index -> answer, for the open step
//	maker:{tenant/job}:tally  hash  vote key -> valid votes, for the open step
const keyPrefix = "maker:"

// JobRef names a job.
type JobRef struct {
	Tenant string
	JobID  string
}

func (j JobRef) tag() string { return "{" + j.Tenant + "/" + j.JobID + "}" }

// keys returns the step, slots and tally keys, the KEYS of every script.
func (j JobRef) keys() []string {
	t := keyPrefix + j.tag()
	return []string{t + ":step", t + ":slots", t + ":tally"}
}
