// Package calibrate measures a model on a task the way the MAKER paper did
// before choosing k: steps drawn at random along the task's right path
// (task.Drawer), one sample each at the temperature of a step's later
// votes (0.1 by default), each judged exactly as a voter judges it
// (internal/sampling: finish_reason "length", too many output tokens, the
// task's strict parser) and, when it is a vote, compared with the task's
// reference answer (task.Referencer).
//
// Run returns a schemas.Calibration: p = right / valid, the valid fraction
// v = valid / samples, each with its exact (Clopper–Pearson) confidence
// interval, the mean prompt and completion tokens of a call, and the red
// flags by reason. Failed model calls (the server's errors after the
// client's retries) are counted apart and are not samples; a model that
// refuses for good (a bad key, an unknown model, no quota) stops the run.
//
// Calibrations are fleet-wide facts about a model: they are stored in the
// KV bucket maker_calibrations (bus.Namespace.CalibrationsBucket) under
// <task>.<model>.<prompt version> (Key), written only by the admin
// identity and read by everyone (internal/auth). Lookup finds the one for
// a task, model and prompt version (PromptVersion): `maker plan` and the
// job forecasts take p, the valid fraction and the tokens per call from
// it, and adaptive k takes its lower bound PLow as the prior of p.
package calibrate
