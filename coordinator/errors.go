package coordinator

import "errors"

// Sentinel errors.
var (
	// ErrConfig is returned by New for an invalid Config.
	ErrConfig = errors.New("coordinator: invalid config")
	// ErrInvalidJob marks a job spec the coordinator refuses; its job gets
	// a failed report and its message is terminated.
	ErrInvalidJob = errors.New("coordinator: invalid job")
)

// Reasons a job stops short of its end without failing.
var (
	// errLeaseLost: another coordinator owns the job now; this one must not
	// write anything more for it.
	errLeaseLost = errors.New("coordinator: lease lost")
	// errPaused: the job was paused at a step boundary.
	errPaused = errors.New("coordinator: job paused")
	// errControlled: a wait was cut short by a pause or cancel.
	errControlled = errors.New("coordinator: paused or cancelled")
)
