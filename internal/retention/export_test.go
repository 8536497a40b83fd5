package retention

// SetRenewEvery makes s renew its lease every n items.
func SetRenewEvery(s *Sweeper, n int) { s.renewEvery = n }

// SetAfterRead makes s call fn once it has read a finished job's record,
// before it removes anything of the job.
func SetAfterRead(s *Sweeper, fn func(tenant, id string)) { s.afterRead = fn }
