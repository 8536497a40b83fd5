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
