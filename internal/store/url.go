package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The --redis URL, one syntax for every command (ParseRedisURL):
//
//	redis://[user[:pass]@]host[:port][/db][?opts]            one server
//	rediss://...                                             the same over TLS
//	redis+cluster://[user[:pass]@]h1[:port][,h2...][?opts]   Redis Cluster, seed nodes
//	redis://[user[:pass]@]h1[:port]?addr=h2:p&addr=h3:p      Redis Cluster too (go-redis's
//	                                                         ParseClusterURL form: more than one address)
//	redis+sentinel://[user[:pass]@]s1[:port][,s2...]/master[/db][?opts]
//	                                                         a master found through Sentinel
//
// rediss+cluster:// and rediss+sentinel:// use TLS (for a Sentinel set-up:
// to the sentinels and to the data nodes alike). The user and password are
// the data nodes' (the store's ACL user); sentinels that want a password of
// their own take sentinel_username and sentinel_password. Default ports:
// 6379, 26379 for sentinels. Options:
//
//	db                 database number (not with Cluster, which has only 0)
//	addr               another seed node or sentinel, repeatable
//	cluster            1: Redis Cluster even with a single seed node
//	tls_ca             PEM file of the CA that signed the servers' certificates
//	tls_cert, tls_key  PEM files of a client certificate (mutual TLS)
//	tls_server_name    the name to check the servers' certificates against
//	                   (default: each server's host)
//	sentinel_username, sentinel_password
//	client_name, dial_timeout, read_timeout, write_timeout (durations,
//	a plain number is seconds), pool_size, max_retries, max_redirects
//
// A tls_* option turns TLS on for a redis:// URL too.

// Redis modes.
const (
	ModeSingle   = "single"
	ModeCluster  = "cluster"
	ModeSentinel = "sentinel"
)

// ErrRedisURL is wrapped by every error of ParseRedisURL.
var ErrRedisURL = errors.New("bad redis URL")

// Default ports.
const (
	defaultRedisPort    = "6379"
	defaultSentinelPort = "26379"
)

// RedisOptions is a parsed Redis URL.
type RedisOptions struct {
	// Mode is ModeSingle, ModeCluster or ModeSentinel.
	Mode string
	// Universal configures the client; NewClient hands it to
	// redis.NewUniversalClient.
	Universal redis.UniversalOptions
	// Redacted is the URL with its passwords replaced, for logs and errors.
	Redacted string
}

// NewClient returns a client for o: a *redis.Client (single server or
// Sentinel) or a *redis.ClusterClient.
func (o *RedisOptions) NewClient() redis.UniversalClient {
	u := o.Universal // NewUniversalClient keeps no pointer to it, but be safe
	c := redis.NewUniversalClient(&u)
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.AddHook(reloadOnFailure{cc})
	}
	return c
}

// reloadOnFailure asks a cluster client to reload the slot map when a
// command fails for a reason other than a plain error reply. go-redis
// reloads it on MOVED, but a SIGKILLed master sends none: its slots stay
// mapped to a node that refuses connections until the periodic reload,
// long after a replica took over. A reload reads the map from any live
// node, so the first failure after the failover finds the new master.
type reloadOnFailure struct{ cc *redis.ClusterClient }

var _ redis.Hook = reloadOnFailure{}

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil {
			for _, c := range cmds {
				if err = c.Err(); err != nil && h.failed(err) {
					break
				}
			}
		}
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnFailure) check(ctx context.Context, err error) {
	if h.failed(err) {
		h.cc.ReloadState(ctx) // in the background, at most every 200ms
	}
}

// failed: a connection failure, or a cluster that says it is down.
func (h reloadOnFailure) failed(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		return strings.HasPrefix(msg, "CLUSTERDOWN") || strings.HasPrefix(msg, "TRYAGAIN")
	}
	return true
}

// NewRedisClient parses raw (ParseRedisURL) and returns a client for it.
func NewRedisClient(raw string) (redis.UniversalClient, *RedisOptions, error) {
	o, err := ParseRedisURL(raw)
	if err != nil {
		return nil, nil, err
	}
	return o.NewClient(), o, nil
}

// RedactURL returns raw with the password of its user information and of
// a sentinel_password option replaced by "xxxxx". It works on any string,
// a URL or not, so that an unparsable one can still be shown.
func RedactURL(raw string) string {
	rest := raw
	prefix := ""
	if i := strings.Index(raw, "://"); i >= 0 {
		prefix, rest = raw[:i+3], raw[i+3:]
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(auth, "@"); at >= 0 {
		user := auth[:at]
		if c := strings.Index(user, ":"); c >= 0 {
			user = user[:c] + ":xxxxx"
		}
		auth = user + "@" + auth[at+1:]
	}
	// Query values are redacted by name, without decoding the query, so
	// what is shown is what was given.
	if q := strings.Index(tail, "?"); q >= 0 {
		frag := ""
		query := tail[q+1:]
		if h := strings.Index(query, "#"); h >= 0 {
			query, frag = query[:h], query[h:]
		}
		parts := strings.Split(query, "&")
		for i, p := range parts {
			name, _, ok := strings.Cut(p, "=")
			if ok && isSecretOption(name) {
				parts[i] = name + "=xxxxx"
			}
		}
		tail = tail[:q+1] + strings.Join(parts, "&") + frag
	}
	return prefix + auth + tail
}

func isSecretOption(name string) bool {
	n, err := url.QueryUnescape(name)
	if err != nil {
		n = name
	}
	return strings.Contains(strings.ToLower(n), "password")
}

// ParseRedisURL parses a --redis URL (see the syntax above). Its errors
// wrap ErrRedisURL and show the URL redacted, never a password.
func ParseRedisURL(raw string) (*RedisOptions, error) {
	red := RedactURL(raw)
	fail := func(format string, args ...any) (*RedisOptions, error) {
		return nil, fmt.Errorf("%w %q: %s", ErrRedisURL, red, fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return fail("want redis://, rediss://, redis+cluster:// or redis+sentinel:// (see --help)")
	}
	o := &RedisOptions{Mode: ModeSingle, Redacted: red}
	useTLS := false
	switch strings.ToLower(scheme) {
	case "redis":
	case "rediss":
		useTLS = true
	case "redis+cluster":
		o.Mode = ModeCluster
	case "rediss+cluster":
		o.Mode, useTLS = ModeCluster, true
	case "redis+sentinel":
		o.Mode = ModeSentinel
	case "rediss+sentinel":
		o.Mode, useTLS = ModeSentinel, true
	default:
		return fail("scheme %q: want redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel", scheme)
	}
	// The host list is split off by hand: net/url takes one host only.
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo, hostlist := "", authority
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hostlist = authority[:at+1], authority[at+1:]
	}
	hosts := strings.Split(hostlist, ",")
	if o.Mode == ModeSingle && len(hosts) > 1 {
		return fail("several hosts: use redis+cluster:// or redis+sentinel://")
	}
	// Parse the rest as a URL with the first host only: it decodes the
	// user information, path and query.
	u, err := url.Parse("redis://" + userinfo + "placeholder" + tail)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the whole URL, password and all
		}
		return fail("%v", err)
	}
	if u.Fragment != "" {
		return fail("a URL fragment (#...) means nothing here")
	}
	if u.User != nil {
		o.Universal.Username = u.User.Username()
		o.Universal.Password, _ = u.User.Password()
	}
	defPort := defaultRedisPort
	if o.Mode == ModeSentinel {
		defPort = defaultSentinelPort
	}
	for _, h := range hosts {
		addr, err := hostPort(h, defPort)
		if err != nil {
			return fail("%v", err)
		}
		o.Universal.Addrs = append(o.Universal.Addrs, addr)
	}

	// Path: /db, or /master[/db] with Sentinel.
	path := strings.Trim(u.Path, "/")
	var segs []string
	if path != "" {
		segs = strings.Split(path, "/")
	}
	dbText := ""
	switch o.Mode {
	case ModeSentinel:
		if len(segs) == 0 || segs[0] == "" {
			return fail("no master name: redis+sentinel://host:26379,.../MASTER[/DB]")
		}
		if len(segs) > 2 {
			return fail("path %q: want /MASTER[/DB]", u.Path)
		}
		o.Universal.MasterName = segs[0]
		if len(segs) == 2 {
			dbText = segs[1]
		}
	default:
		if len(segs) > 1 {
			return fail("path %q: want /DB", u.Path)
		}
		if len(segs) == 1 {
			dbText = segs[0]
		}
	}

	q := u.Query()
	take := func(name string) (string, bool) {
		vs, ok := q[name]
		delete(q, name)
		if !ok || len(vs) == 0 {
			return "", false
		}
		if len(vs) > 1 {
			return vs[len(vs)-1], true
		}
		return vs[0], true
	}
	if v, ok := take("db"); ok {
		dbText = v
	}
	if dbText != "" {
		db, err := strconv.Atoi(dbText)
		if err != nil || db < 0 {
			return fail("database %q is not a number >= 0", dbText)
		}
		o.Universal.DB = db
	}
	for _, a := range q["addr"] {
		addr, err := hostPort(a, defPort)
		if err != nil {
			return fail("addr: %v", err)
		}
		o.Universal.Addrs = append(o.Universal.Addrs, addr)
	}
	delete(q, "addr")
	if v, ok := take("cluster"); ok {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fail("cluster=%q: want 1 or 0", v)
		}
		if on {
			if o.Mode == ModeSentinel {
				return fail("cluster=1 with redis+sentinel://: a Sentinel set-up is not a cluster")
			}
			o.Mode = ModeCluster
		}
	}
	if o.Mode == ModeSingle && len(o.Universal.Addrs) > 1 {
		// go-redis's ParseClusterURL form: seed nodes in addr=.
		o.Mode = ModeCluster
	}
	if o.Mode == ModeCluster {
		if o.Universal.DB != 0 {
			return fail("database %d: Redis Cluster has only database 0", o.Universal.DB)
		}
		o.Universal.IsClusterMode = true
	}
	o.Universal.SentinelUsername, _ = take("sentinel_username")
	o.Universal.SentinelPassword, _ = take("sentinel_password")
	if o.Mode != ModeSentinel && (o.Universal.SentinelUsername != "" || o.Universal.SentinelPassword != "") {
		return fail("sentinel_username and sentinel_password need redis+sentinel://")
	}
	o.Universal.ClientName, _ = take("client_name")
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{
		{"dial_timeout", &o.Universal.DialTimeout},
		{"read_timeout", &o.Universal.ReadTimeout},
		{"write_timeout", &o.Universal.WriteTimeout},
	} {
		if v, ok := take(d.name); ok {
			dur, err := parseDuration(v)
			if err != nil {
				return fail("%s=%q: %v", d.name, v, err)
			}
			*d.to = dur
		}
	}
	for _, n := range []struct {
		name string
		to   *int
	}{
		{"pool_size", &o.Universal.PoolSize},
		{"max_retries", &o.Universal.MaxRetries},
		{"max_redirects", &o.Universal.MaxRedirects},
	} {
		if v, ok := take(n.name); ok {
			i, err := strconv.Atoi(v)
			if err != nil || i < -1 {
				return fail("%s=%q: want a number (-1: none)", n.name, v)
			}
			*n.to = i
		}
	}
	ca, _ := take("tls_ca")
	cert, _ := take("tls_cert")
	key, _ := take("tls_key")
	serverName, _ := take("tls_server_name")
	if len(q) > 0 {
		names := make([]string, 0, len(q))
		for n := range q {
			names = append(names, n)
		}
		slices.Sort(names)
		return fail("unknown option %s (known: db, addr, cluster, tls_ca, tls_cert, tls_key, tls_server_name, sentinel_username, sentinel_password, client_name, dial_timeout, read_timeout, write_timeout, pool_size, max_retries, max_redirects)", strings.Join(names, ", "))
	}
	if useTLS || ca != "" || cert != "" || key != "" || serverName != "" {
		tc, err := TLSConfig(ca, cert, key)
		if err != nil {
			return fail("%v", err)
		}
		tc.ServerName = serverName
		o.Universal.TLSConfig = tc
	}
	return o, nil
}

// TLSConfig returns a client TLS configuration (TLS 1.2 or later) that
// trusts the CA in caFile (default: the system's roots) and presents the
// certificate in certFile and keyFile (both or neither). It leaves
// ServerName empty: each server's certificate is then checked against the
// host it is dialled at, which is what a cluster's many nodes need.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca %s: no PEM certificate in it", caFile)
		}
		tc.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("tls_cert and tls_key go together")
	}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls_cert/tls_key: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// hostPort checks one host[:port] and adds the default port.
func hostPort(h, defPort string) (string, error) {
	if h == "" {
		return "", errors.New("empty host")
	}
	u, err := url.Parse("redis://" + h)
	if err != nil || u.Host != h || u.User != nil || u.Path != "" || u.RawQuery != "" {
		return "", fmt.Errorf("host %q: want HOST[:PORT] or [IPv6][:PORT]", h)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return "", fmt.Errorf("host %q: no host name", h)
	}
	if port == "" {
		if strings.HasSuffix(h, ":") {
			return "", fmt.Errorf("host %q: empty port", h)
		}
		port = defPort
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("host %q: port must be 1..65535", h)
	}
	return net.JoinHostPort(host, port), nil
}

// parseDuration reads a Go duration, or a plain number of seconds.
func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0, errors.New("negative")
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New("want a duration such as 500ms or 3s")
	}
	if d < 0 {
		return 0, errors.New("negative")
	}
	return d, nil
}
