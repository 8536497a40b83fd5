package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/makerfleet/makerfleet/client/httpapi"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestWaitBreakGlassWaits: WaitBreakGlass asks with a short wait until an
// answer is stored (so a held call is heard of within seconds of the
// hold), a long one while it is held, and returns the final answer; it
// tells onHeld once.
func TestWaitBreakGlassWaits(t *testing.T) {
	t.Parallel()
	var waits []string
	answers := []int{404, 404, 200, 200, 200} // nothing, nothing, held, held, final
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/breakglass/bg-1" {
			t.Errorf("path %s", r.URL.Path)
		}
		n := len(waits)
		waits = append(waits, r.URL.Query().Get("wait"))
		switch {
		case answers[n] == 404:
			problem(w, 404, "not-found", "no answer yet")
		case n < len(answers)-1:
			answer(w, 200, schemas.BreakGlassResponse{RequestID: "bg-1", Outcome: schemas.BreakGlassHeld, Reason: "over the approval threshold"})
		default:
			answer(w, 200, schemas.BreakGlassResponse{RequestID: "bg-1", Outcome: schemas.BreakGlassAnswered})
		}
	}))
	defer srv.Close()
	c, err := httpapi.New(srv.URL, testKey, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	r, err := c.WaitBreakGlass(t.Context(), "bg-1", func(schemas.BreakGlassResponse) { held++ })
	if err != nil || r.Outcome != schemas.BreakGlassAnswered {
		t.Fatalf("WaitBreakGlass = %+v, %v", r, err)
	}
	if want := []string{"5", "5", "5", "30", "30"}; !slices.Equal(waits, want) || held != 1 {
		t.Errorf("waits %v, held told %d times; want %v and once", waits, held, want)
	}
}
