package bus_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://bob:s3cret@127.0.0.1:4222", "nats://bob:REDACTED@127.0.0.1:4222"},
		{"tls://bob:p%40ss@host:4222", "tls://bob:REDACTED@host:4222"},
		{"nats://tok3n@host:4222", "nats://REDACTED@host:4222"},
		{"bob:pw@host:4222", "bob:REDACTED@host:4222"},
		{"nats://a:x@h1:4222, nats://h2:4222,nats://b:y@h3", "nats://a:REDACTED@h1:4222,nats://h2:4222,nats://b:REDACTED@h3"},
		{"nats://host:4222/path@x", "nats://host:4222/path@x"},
		{"", ""},
	} {
		if got := bus.RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestConnectRedactsPassword: a failed connect names the server without
// the password or token of its URL (finding 5 printed it on stderr).
func TestConnectRedactsPassword(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		Username: "bob", Password: "right-pass"})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	addr := ns.Addr().String()
	free, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, url, secret string }{
		{"wrong password", "nats://bob:Wr0ng-Pa55@" + addr, "Wr0ng-Pa55"},
		{"escaped password", "nats://bob:p%40ssw0rd%21@" + addr, "p@ssw0rd!"},
		{"token", "nats://T0KEN-SECRET@" + addr, "T0KEN-SECRET"},
		{"nobody listening", "nats://bob:Wr0ng-Pa55@127.0.0.1:" + strconv.Itoa(free), "Wr0ng-Pa55"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := bus.Connect(tc.url, "redact-test")
			if err == nil {
				t.Fatal("connected")
			}
			msg := err.Error()
			for _, s := range []string{tc.secret, strings.SplitN(strings.SplitN(tc.url, "@", 2)[0], "//", 2)[1]} {
				if strings.Contains(msg, s) && s != "bob" {
					t.Errorf("error shows %q: %s", s, msg)
				}
			}
			if !strings.Contains(msg, "REDACTED@") {
				t.Errorf("error does not name the (redacted) server: %s", msg)
			}
		})
	}
}

func TestConnAuthValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		a    bus.Auth
		ok   bool
		id   string
	}{
		{"zero", bus.Auth{}, true, ""},
		{"nkey names the identity", bus.Auth{NKey: "/x/tenant-alpha.nk"}, true, "tenant-alpha"},
		{"creds names the identity", bus.Auth{Creds: "/x/voter.creds"}, true, "voter"},
		{"identity wins", bus.Auth{Identity: "judge", NKey: "/x/other.nk"}, true, "judge"},
		{"creds and nkey", bus.Auth{Creds: "a.creds", NKey: "b.nk"}, false, ""},
		{"cert without key", bus.Auth{TLSCert: "c.pem"}, false, ""},
		{"key without cert", bus.Auth{TLSKey: "k.pem"}, false, ""},
		{"bad identity", bus.Auth{Identity: "a.b"}, false, ""},
		{"wildcard identity", bus.Auth{Identity: "*"}, false, ""},
	} {
		err := tc.a.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, bus.ErrConnOptions) {
			t.Errorf("%s: %v is not ErrConnOptions", tc.name, err)
		}
		if tc.ok && tc.a.IdentityName() != tc.id {
			t.Errorf("%s: identity %q, want %q", tc.name, tc.a.IdentityName(), tc.id)
		}
	}
}

// TestConnInboxPrefix: replies of an identity's connection come under
// _INBOX.<identity>, the only inbox its permissions let it read.
func TestConnInboxPrefix(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	nc, err := bus.Connect(n.URL, "inbox-test", bus.Auth{Identity: "tenant-alpha"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if in := nc.NewRespInbox(); !strings.HasPrefix(in, "_INBOX.tenant-alpha.") {
		t.Errorf("reply inbox %s", in)
	}
	plain, err := bus.Connect(n.URL, "inbox-test")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if in := plain.NewInbox(); !strings.HasPrefix(in, "_INBOX.") || strings.Count(in, ".") != 1 {
		t.Errorf("default inbox %s", in)
	}
}

// TestConnMissingSeed: a seed file that is not there fails Connect naming
// it.
func TestConnMissingSeed(t *testing.T) {
	t.Parallel()
	n := testkit.StartNATS(t)
	path := filepath.Join(t.TempDir(), "voter.nk")
	_, err := bus.Connect(n.URL, "seed-test", bus.Auth{NKey: path})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want one naming %s", err, path)
	}
	if _, statErr := os.Stat(path); !errors.Is(statErr, os.ErrNotExist) {
		t.Fatal(statErr)
	}
}

// TestConnPermissionError: nats.go's asynchronous permission violation
// becomes ErrPermission naming what was refused.
func TestConnPermissionError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`Permissions Violation for Publish to "maker.v1.result.a.b.0"`, "permission denied: publish to maker.v1.result.a.b.0"},
		{`Permissions Violation for Subscription to "_INBOX.>"`, "permission denied: subscribe to _INBOX.>"},
		{`Permissions Violation for Subscription to "x.y" using queue "q"`, "permission denied: subscribe to x.y"},
	} {
		err := bus.PermissionError(errors.Join(nats.ErrPermissionViolation, errors.New(tc.in)))
		if !errors.Is(err, bus.ErrPermission) || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
	if err := errors.New("other"); bus.PermissionError(err) != err {
		t.Error("other errors changed")
	}
}
