package bus

import "time"

// KeepAlive exposes the worker's keep-alive to the tests.
var KeepAlive = keepAlive

// StartWatch exposes startWatch to the tests.
var StartWatch = startWatch

// SetWatchAttemptTimeout sets watchAttemptTimeout for a test.
func SetWatchAttemptTimeout(t interface{ Cleanup(func()) }, d time.Duration) {
	old := watchAttemptTimeout
	watchAttemptTimeout = d
	t.Cleanup(func() { watchAttemptTimeout = old })
}
