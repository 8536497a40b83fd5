package schemas_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

func TestValidWebhookURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, want string // want "": valid
	}{
		{"https://hooks.example.com/maker?x=1", ""},
		{"http://127.0.0.1:8080/hook", ""}, // where it may point is the dialer's to say
		{"http://[::1]:9/x", ""},
		{"ftp://example.com/x", "must be http:// or https://"},
		{"/relative/path", "must be http:// or https://"},
		{"https://", "names no host"},
		{"https:opaque", "names no host"},
		{"https://user:secret@example.com/", "user info"},
		{"https://example.com/#frag", "fragment"},
		{"https://exa mple.com/", "spaces or control characters"},
		{"https://example.com/\n", "spaces or control characters"},
		{"https://example.com:99999/", "not a port"},
		{"https://ex$ample.com/", "not a host name"},
		{"https://example.com/" + strings.Repeat("a", schemas.MaxWebhookURLBytes), "at most 2048"},
	} {
		err := schemas.ValidWebhookURL(tc.url)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.url, err)
		case tc.want != "" && (!errors.Is(err, schemas.ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want ErrInvalid containing %q", tc.url, err, tc.want)
		}
	}
}

func TestWebhookDeliveryID(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1764590400123)
	for _, job := range []string{"j1", "a_b_c", "batch_x-3", "J-1_2"} {
		id := schemas.WebhookJobDeliveryID(job, at)
		if err := schemas.ValidWebhookDeliveryID(id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if schemas.WebhookJobDeliveryID("a", at) == schemas.WebhookJobDeliveryID("a", at.Add(time.Millisecond)) {
		t.Error("a job id used again names the same delivery")
	}
	for _, id := range []string{"", "job_", "job_a", "job_a_", "job_a_x", "job__1", "msg_a_1", "batch_", "job_a.b_1"} {
		if schemas.ValidWebhookDeliveryID(id) == nil {
			t.Errorf("%q is taken as a delivery id", id)
		}
	}
}

// A task's event must be its own tenant's, and a final state's.
func TestWebhookTaskValidate(t *testing.T) {
	t.Parallel()
	good := func() schemas.WebhookTask {
		return schemas.WebhookTask{
			Header: schemas.NewHeader(schemas.KindWebhookTask), Tenant: "acme", ID: "job_j1_5", URL: "https://h.example/x",
			Event: schemas.WebhookEvent{Type: schemas.WebhookJobFinished, Timestamp: time.Unix(5, 0).UTC(),
				Data: schemas.WebhookEventData{Tenant: "acme", JobID: "j1", State: schemas.StateSolved}},
		}
	}
	g := good()
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*schemas.WebhookTask){
		"other tenant's event": func(w *schemas.WebhookTask) { w.Event.Data.Tenant = "globex" },
		"running job":          func(w *schemas.WebhookTask) { w.Event.Data.State = schemas.StateRunning },
		"unknown type":         func(w *schemas.WebhookTask) { w.Event.Type = "job.started" },
		"bad url":              func(w *schemas.WebhookTask) { w.URL = "file:///etc/passwd" },
		"foreign link":         func(w *schemas.WebhookTask) { w.Event.Data.Links = map[string]string{"self": "https://evil.example/"} },
		"long reason":          func(w *schemas.WebhookTask) { w.Event.Data.Reason = strings.Repeat("r", schemas.MaxWebhookReason+1) },
	} {
		w := good()
		mutate(&w)
		if err := w.Validate(); !errors.Is(err, schemas.ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
}
