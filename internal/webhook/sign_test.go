package webhook_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/webhook"
)

// TestSign: the Standard Webhooks reference vector (the scheme's own
// libraries test with it), so any verifyWebhook written to the scheme
// accepts our signatures.
func TestSign(t *testing.T) {
	t.Parallel()
	key, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := webhook.Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

// TestTenantKey: each tenant's key is its own, and shown as whsec_.
func TestTenantKey(t *testing.T) {
	t.Parallel()
	master := []byte("0123456789abcdef0123456789abcdef")
	a, b := webhook.TenantKey(master, "alpha"), webhook.TenantKey(master, "beta")
	if string(a) == string(b) || len(a) != 32 {
		t.Fatalf("keys %x %x", a, b)
	}
	if string(webhook.TenantKey([]byte("another master, also 32 bytes!!!"), "alpha")) == string(a) {
		t.Error("a tenant's key does not depend on the master")
	}
	s := webhook.Secret(a)
	back, err := webhook.ParseSecret(s)
	if !strings.HasPrefix(s, "whsec_") || err != nil || string(back) != string(a) {
		t.Errorf("secret %s reads back as %x, %v", s, back, err)
	}
}

func TestGuard(t *testing.T) {
	t.Parallel()
	own := netip.MustParseAddrPort("203.0.113.7:8000")
	def := &webhook.Guard{Own: []netip.AddrPort{own}}
	allow := &webhook.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, Own: []netip.AddrPort{own}}
	for _, tc := range []struct {
		g    *webhook.Guard
		addr string
		why  string // "": allowed
	}{
		{def, "93.184.216.34:443", ""},
		{def, "[2606:2800:220:1::1]:443", ""},
		{def, "127.0.0.1:80", "loopback"},
		{def, "127.8.9.1:80", "loopback"},
		{def, "[::1]:80", "loopback"},
		{def, "[::ffff:127.0.0.1]:80", "loopback"},
		{def, "169.254.169.254:80", "link-local"},
		{def, "[fe80::1]:80", "link-local"},
		{def, "10.0.0.5:80", "private"},
		{def, "172.16.3.4:80", "private"},
		{def, "192.168.1.1:80", "private"},
		{def, "[fd00::1]:80", "unique local"},
		{def, "100.64.0.1:80", "carrier-grade NAT"},
		{def, "0.0.0.0:80", "unspecified"},
		{def, "[::]:80", "unspecified"},
		{def, "224.0.0.1:80", "multicast"},
		{def, "203.0.113.7:8000", "own listen address"},
		{def, "203.0.113.7:443", ""},
		{allow, "10.1.2.3:80", ""},
		{allow, "10.2.0.1:80", "private"},
		{allow, "127.0.0.1:80", "loopback"},
		{&webhook.Guard{AllowPrivate: true}, "169.254.169.254:80", ""},
	} {
		err := tc.g.Check(netip.MustParseAddrPort(tc.addr))
		switch {
		case tc.why == "" && err != nil:
			t.Errorf("%s: %v", tc.addr, err)
		case tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why)):
			t.Errorf("%s: %v, want refused as %s", tc.addr, err, tc.why)
		}
	}
}

func TestParseAllow(t *testing.T) {
	t.Parallel()
	got, err := webhook.ParseAllow(" 10.1.0.0/16, 127.0.0.1 ,fd00::/8,")
	if err != nil || len(got) != 3 || got[1] != netip.MustParsePrefix("127.0.0.1/32") {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := webhook.ParseAllow("10.0.0.0/33"); err == nil {
		t.Error("a bad prefix was taken")
	}
	if _, err := webhook.ParseAllow("example.com"); err == nil {
		t.Error("a name was taken")
	}
}
