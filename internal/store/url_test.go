package store_test

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

func TestParseRedisURL(t *testing.T) {
	t.Parallel()
	type want struct {
		mode               string
		addrs              []string
		user, pass, master string
		db                 int
		tls                bool
		sentUser, sentPass string
	}
	for _, tc := range []struct {
		url  string
		want want
	}{
		{"redis://127.0.0.1:6379/0", want{mode: store.ModeSingle, addrs: []string{"127.0.0.1:6379"}}},
		{"redis://localhost", want{mode: store.ModeSingle, addrs: []string{"localhost:6379"}}},
		{"redis://h:1/3", want{mode: store.ModeSingle, addrs: []string{"h:1"}, db: 3}},
		{"redis://h:1/3?db=4", want{mode: store.ModeSingle, addrs: []string{"h:1"}, db: 4}},
		{"redis://maker:s3cr%40t@h:6380/2", want{mode: store.ModeSingle, addrs: []string{"h:6380"}, user: "maker", pass: "s3cr@t", db: 2}},
		{"redis://:only-pass@h", want{mode: store.ModeSingle, addrs: []string{"h:6379"}, pass: "only-pass"}},
		{"rediss://maker:pw@[::1]:6390/0", want{mode: store.ModeSingle, addrs: []string{"[::1]:6390"}, user: "maker", pass: "pw", tls: true}},
		{"REDISS://h", want{mode: store.ModeSingle, addrs: []string{"h:6379"}, tls: true}},
		// Cluster: go-redis's ParseClusterURL form, several seeds, one seed.
		{"redis://h1:7000?addr=h2:7001&addr=h3:7002", want{mode: store.ModeCluster, addrs: []string{"h1:7000", "h2:7001", "h3:7002"}}},
		{"redis+cluster://u:p@h1:7000,h2:7001,h3", want{mode: store.ModeCluster, addrs: []string{"h1:7000", "h2:7001", "h3:6379"}, user: "u", pass: "p"}},
		{"redis+cluster://h1:7000", want{mode: store.ModeCluster, addrs: []string{"h1:7000"}}},
		{"redis://h1:7000/0?cluster=1", want{mode: store.ModeCluster, addrs: []string{"h1:7000"}}},
		{"rediss+cluster://h1:7000?addr=h2:7001", want{mode: store.ModeCluster, addrs: []string{"h1:7000", "h2:7001"}, tls: true}},
		// Sentinel.
		{"redis+sentinel://s1,s2:26380,s3:26381/mymaster", want{mode: store.ModeSentinel, addrs: []string{"s1:26379", "s2:26380", "s3:26381"}, master: "mymaster"}},
		{"redis+sentinel://maker:pw@s1:26379/mymaster/2?sentinel_username=sen&sentinel_password=spw", want{
			mode: store.ModeSentinel, addrs: []string{"s1:26379"}, master: "mymaster", db: 2, user: "maker", pass: "pw", sentUser: "sen", sentPass: "spw"}},
		{"rediss+sentinel://s1/m?addr=s2", want{mode: store.ModeSentinel, addrs: []string{"s1:26379", "s2:26379"}, master: "m", tls: true}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			o, err := store.ParseRedisURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			u := o.Universal
			got := want{mode: o.Mode, addrs: u.Addrs, user: u.Username, pass: u.Password, master: u.MasterName,
				db: u.DB, tls: u.TLSConfig != nil, sentUser: u.SentinelUsername, sentPass: u.SentinelPassword}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if u.IsClusterMode != (tc.want.mode == store.ModeCluster) {
				t.Errorf("IsClusterMode %v for mode %s", u.IsClusterMode, o.Mode)
			}
			// The client go-redis builds is the one the mode says.
			c := o.NewClient()
			defer c.Close()
			_, isCluster := c.(*redis.ClusterClient)
			if isCluster != (o.Mode == store.ModeCluster) {
				t.Errorf("client %T for mode %s", c, o.Mode)
			}
			if p := tc.want.pass; p != "" && strings.Contains(o.Redacted, p) {
				t.Errorf("Redacted %q shows the password", o.Redacted)
			}
		})
	}
}

func TestParseRedisURLOptions(t *testing.T) {
	t.Parallel()
	o, err := store.ParseRedisURL("redis://h/0?dial_timeout=2&read_timeout=500ms&write_timeout=1s&pool_size=7&max_retries=-1&client_name=c&max_redirects=5")
	if err != nil {
		t.Fatal(err)
	}
	u := o.Universal
	if u.DialTimeout != 2*time.Second || u.ReadTimeout != 500*time.Millisecond || u.WriteTimeout != time.Second ||
		u.PoolSize != 7 || u.MaxRetries != -1 || u.ClientName != "c" || u.MaxRedirects != 5 {
		t.Errorf("options not applied: %+v", u)
	}
}

func TestParseRedisURLTLSFiles(t *testing.T) {
	t.Parallel()
	files := testkit.WriteTLSFiles(t)
	dir, ca := files.Dir, files.CA
	o, err := store.ParseRedisURL("redis://h:1/0?tls_ca=" + url.QueryEscape(ca) + "&tls_server_name=redis.internal")
	if err != nil {
		t.Fatal(err)
	}
	tc := o.Universal.TLSConfig
	if tc == nil || tc.RootCAs == nil || tc.ServerName != "redis.internal" {
		t.Fatalf("tls_ca did not turn TLS on with the CA: %+v", tc)
	}
	for _, bad := range []struct{ url, want string }{ // want "": no error
		{"rediss://h?tls_ca=" + filepath.Join(dir, "missing.pem"), "tls_ca"},
		{"rediss://h?tls_ca=" + filepath.Join(dir, "junk.pem"), "no PEM certificate"},
		{"rediss://h?tls_cert=" + ca, "go together"},
		{"rediss://h?tls_cert=" + ca + "&tls_key=" + ca, "tls_cert/tls_key"},
		{"rediss://h?tls_cert=" + files.ClientCert + "&tls_key=" + files.ClientKey + "&tls_ca=" + ca, ""},
	} {
		_ = os.WriteFile(filepath.Join(dir, "junk.pem"), []byte("junk"), 0o600)
		_, err := store.ParseRedisURL(bad.url)
		if bad.want == "" {
			if err != nil {
				t.Errorf("%s: %v", bad.url, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want one saying %q", bad.url, err, bad.want)
		}
	}
}

func TestParseRedisURLErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"127.0.0.1:6379", "want redis://"},
		{"http://h", `scheme "http"`},
		{"unix:///tmp/redis.sock", `scheme "unix"`},
		{"redis://h1,h2", "several hosts"},
		{"redis://h:notaport", `host "h:notaport": want HOST[:PORT]`},
		{"redis://h:0", "port must be 1..65535"},
		{"redis://h:99999", "port must be 1..65535"},
		{"redis://h:", "empty port"},
		{"redis+cluster://h1,,h3", "empty host"},
		{"redis://h/x", `database "x"`},
		{"redis://h/-1", `database "-1"`},
		{"redis://h/1/2", "want /DB"},
		{"redis://h?db=x", `database "x"`},
		{"redis+cluster://h/3", "only database 0"},
		{"redis://h/2?addr=h2", "only database 0"},
		{"redis://h?addr=h2:x", "addr"},
		{"redis+sentinel://s1", "no master name"},
		{"redis+sentinel://s1/", "no master name"},
		{"redis+sentinel://s1/m/0/x", "want /MASTER[/DB]"},
		{"redis+sentinel://s1/m?cluster=1", "not a cluster"},
		{"redis://h?cluster=maybe", "cluster="},
		{"redis://h?sentinel_password=x", "need redis+sentinel"},
		{"redis://h?dial_timeout=soon", "dial_timeout"},
		{"redis://h?read_timeout=-2s", "negative"},
		{"redis://h?pool_size=many", "pool_size"},
		{"redis://h?master_name=m", "unknown option master_name"},
		{"redis://h?foo=1&bar=2", "unknown option bar, foo"},
		{"redis://h#frag", "fragment"},
		{"redis://u:p@h:1/%zz", "invalid URL escape"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := store.ParseRedisURL(tc.url)
			if err == nil {
				t.Fatalf("no error, want one saying %q", tc.want)
			}
			if !errors.Is(err, store.ErrRedisURL) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %q, want ErrRedisURL saying %q", err, tc.want)
			}
		})
	}
}

// TestParseRedisURLNeverShowsPasswords: errors and Redacted replace the
// passwords of the user information and of sentinel_password.
func TestParseRedisURLNeverShowsPasswords(t *testing.T) {
	t.Parallel()
	const secret = "Hunter2Secret"
	for _, raw := range []string{
		"redis://maker:" + secret + "@h:notaport/0",
		"redis://maker:" + secret + "@h/x",
		"ftp://maker:" + secret + "@h",
		"redis+cluster://maker:" + secret + "@h1,,h2",
		"redis+sentinel://maker:" + secret + "@s1/m?sentinel_password=" + secret + "&bogus=1",
		"redis+sentinel://s1/m?sentinel_password=" + secret + "&foo=1",
		"redis://maker:" + secret + "@h/%zz",
	} {
		_, err := store.ParseRedisURL(raw)
		if err == nil {
			t.Fatalf("%s: no error", store.RedactURL(raw))
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error shows the password: %v", err)
		}
		if r := store.RedactURL(raw); strings.Contains(r, secret) || !strings.Contains(r, "xxxxx") {
			t.Errorf("RedactURL(%q) = %q", raw, r)
		}
	}
	if got, want := store.RedactURL("redis+sentinel://u:p@s1,s2/m/0?sentinel_password=q&db=0"), "redis+sentinel://u:xxxxx@s1,s2/m/0?sentinel_password=xxxxx&db=0"; got != want {
		t.Errorf("RedactURL = %q, want %q", got, want)
	}
	if got, want := store.RedactURL("redis://h:1/0"), "redis://h:1/0"; got != want {
		t.Errorf("RedactURL = %q, want %q", got, want)
	}
}

// FuzzParseRedisURL: the parser never panics, and neither its errors nor
// Redacted show the password of the user information.
func FuzzParseRedisURL(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379/0", "rediss://u:p@h/1", "redis+cluster://h1:7000,h2:7001?addr=h3",
		"redis+sentinel://s1,s2/mymaster/0?sentinel_password=x", "redis://h?addr=[::1]:7000&cluster=1",
		"redis://h/%zz", "redis://:@/", "redis+sentinel:///", "redis://[::1", "redis://h?db=",
	} {
		f.Add(s, "s3cretpassword")
	}
	f.Fuzz(func(t *testing.T, raw, pass string) {
		_, _ = store.ParseRedisURL(raw)
		_ = store.RedactURL(raw)
		if len(pass) < 8 || strings.ContainsAny(pass, "@/?#:%") || strings.Contains(raw, pass) {
			return
		}
		// Put pass in the user information of raw, if it has one to hold it.
		i := strings.Index(raw, "://")
		if i < 0 {
			return
		}
		withPass := raw[:i+3] + "user:" + pass + "@" + raw[i+3:]
		o, err := store.ParseRedisURL(withPass)
		if err != nil && strings.Contains(err.Error(), pass) {
			t.Fatalf("error shows the password: %v", err)
		}
		if err == nil && strings.Contains(o.Redacted, pass) {
			t.Fatalf("Redacted shows the password: %q", o.Redacted)
		}
		if strings.Contains(store.RedactURL(withPass), pass) {
			t.Fatalf("RedactURL shows the password: %q", store.RedactURL(withPass))
		}
	})
}
