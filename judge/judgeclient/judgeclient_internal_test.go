package judgeclient

import (
	"errors"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

func TestResponseError(t *testing.T) {
	t.Parallel()
	for outcome, want := range map[string]error{
		schemas.BreakGlassAnswered: nil, schemas.BreakGlassDegraded: nil,
		schemas.BreakGlassRefused: ErrRefused, schemas.BreakGlassDenied: ErrDenied, schemas.BreakGlassFailed: ErrFailed,
	} {
		err := ResponseError(&schemas.BreakGlassResponse{Outcome: outcome, Reason: "why"})
		if !errors.Is(err, want) || (want != nil && !strings.HasSuffix(err.Error(), ": why")) || (want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v with the reason", outcome, err, want)
		}
	}
}
