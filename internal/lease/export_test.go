package lease

import "time"

// SetClock makes m read the time from now, so tests can move a manager
// past a lease's expiry without waiting for it.
func SetClock(m *Manager, now func() time.Time) { m.now = now }
