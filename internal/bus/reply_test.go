package bus_test

import (
	"testing"

	"github.com/makerfleet/makerfleet/internal/bus"
)

func TestInboxReply(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		reply string
		ok    bool
	}{
		{"_INBOX.abc123", true},
		{"_INBOX.tenant-alpha.abc.1", true},
		{"", false},
		{"_INBOX.", false},
		{"_INBOX", false},
		{"$KV.maker_jobs.beta.job1", false},
		{"maker.v1.sample.beta.job1", false},
		{"$JS.API.STREAM.PURGE.MAKER_JOBS", false},
		{"_INBOX.>", false},
		{"_INBOX.*.x", false},
		{"_INBOX.a..b", false},
		{"_INBOX.a b", false},
		{"x._INBOX.abc", false},
	} {
		if got := bus.InboxReply(tt.reply); got != tt.ok {
			t.Errorf("InboxReply(%q) = %v, want %v", tt.reply, got, tt.ok)
		}
	}
}
