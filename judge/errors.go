package judge

import "errors"

// Sentinel errors. Those of a final answer (refused, denied, failed) are
// judgeclient's, beside Ask.
var (
	// ErrConfig is returned for invalid settings or Config.
	ErrConfig = errors.New("judge: invalid config")
	// ErrJudgeOutput: the judge model's output did not validate.
	ErrJudgeOutput = errors.New("judge: invalid judge output")
	// ErrNotPending: approve or deny named a request that is not waiting
	// for approval.
	ErrNotPending = errors.New("judge: request is not pending approval")
	// ErrBadFile: a context file was refused by the guard.
	ErrBadFile = errors.New("judge: context file refused")
)
