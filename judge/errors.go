package judge

import "errors"

// Sentinel errors.
var (
	// ErrConfig is returned for invalid settings or Config.
	ErrConfig = errors.New("judge: invalid config")
	// ErrRefused: a gate refused the request; the response's Reason says
	// which. Ask returns it together with the response.
	ErrRefused = errors.New("judge: request refused")
	// ErrDenied: a person denied the held request.
	ErrDenied = errors.New("judge: request denied")
	// ErrFailed: the panel produced no answer (every member failed).
	ErrFailed = errors.New("judge: no answer")
	// ErrJudgeOutput: the judge model's output did not validate.
	ErrJudgeOutput = errors.New("judge: invalid judge output")
	// ErrNotPending: approve or deny named a request that is not waiting
	// for approval.
	ErrNotPending = errors.New("judge: request is not pending approval")
	// ErrBadFile: a context file was refused by the guard.
	ErrBadFile = errors.New("judge: context file refused")
)
