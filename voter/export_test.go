package voter

// IsDecided reports whether v holds (tenant, job, step, epoch) as decided,
// for tests that must wait until a step-decided event has reached it.
func IsDecided(v *Voter, tenant, job string, step, epoch int64) bool {
	return v.decided.isDecided(tenant, job, step, epoch)
}
