package topology

import "errors"

var (
	// ErrTopology: an existing stream does not fit what this release
	// needs.
	ErrTopology = errors.New("topology: existing topology does not fit")

	// ErrDuplicates: a duplicate window out of its bounds
	// (CheckDuplicates).
	ErrDuplicates = errors.New("topology: invalid duplicate window")

	// ErrNoFleet and ErrNoJudge: the server has none (or not all) of a
	// namespace's required streams and buckets. Open, OpenJudge and Await
	// return them, wrapped with the namespace, what is missing and who
	// creates it.
	ErrNoFleet = errors.New("no makerfleet topology on this server")
	ErrNoJudge = errors.New("no break-glass (judge) topology on this server")
)
