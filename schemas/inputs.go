package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// Inputs by reference. A job's params of more than InlineParamsMax bytes
// are stored once in the fleet's inputs store (a JetStream object store,
// internal/inputs), named by their content, and messages carry the name
// (ParamsRef) instead: the job spec, its registry record and report, and
// every sample request. So a step's messages do not grow with the input,
// and inputs larger than a message (MaxMsgSize) fit.
const (
	// InputRefPrefix starts every input reference: "sha256:" and the
	// lower-case hex SHA-256 of the stored bytes.
	InputRefPrefix = "sha256:"
	// InlineParamsMax is the most bytes of params a message carries
	// inline; larger ones travel by reference.
	InlineParamsMax = 4 << 10
	// MaxParamsBytes is the most bytes a job's params may have
	// (canonical JSON).
	MaxParamsBytes = 32 << 20
	// MaxStateBytes is the most bytes a task state may have (canonical
	// JSON): states travel inline in every sample request and journal
	// entry, so a step's cost grows with its state.
	MaxStateBytes = 256 << 10
)

// InputRef is the reference of data in the inputs store.
func InputRef(data []byte) string {
	sum := sha256.Sum256(data)
	return InputRefPrefix + hex.EncodeToString(sum[:])
}

// ValidInputRef reports whether ref is a well-formed input reference.
func ValidInputRef(ref string) bool {
	h, ok := strings.CutPrefix(ref, InputRefPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// checkParams checks a message's params: inline (a JSON object when
// object is set, else any JSON) or by a well-formed reference, not both.
func checkParams(k string, params []byte, ref string, object bool) error {
	if ref == "" {
		if object && !isObject(params) {
			return invalid(k, "params must be a JSON object")
		}
		if !object && len(params) > 0 && !json.Valid(params) {
			return invalid(k, "params must be JSON")
		}
		return nil
	}
	if !ValidInputRef(ref) {
		return invalid(k, "params_ref %q is not %s and 64 hex digits", truncate(ref, 80), InputRefPrefix)
	}
	if len(params) > 0 && string(params) != "null" {
		return invalid(k, "params and params_ref are both set: a job's params are inline or by reference, not both")
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
