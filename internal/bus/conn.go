package bus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrPermission: the NATS server refused a publish or subscription of this
// connection (its identity's permissions, see internal/auth). nats.go
// reports publish violations asynchronously, so a request that hit one
// usually fails as a timeout; Violations.Explain turns that into this.
var ErrPermission = errors.New("permission denied")

// ErrConnOptions: connection options that cannot work together or name
// files that are not there.
var ErrConnOptions = errors.New("bus: invalid NATS connection options")

// ConnOption adds to how Connect dials: Auth is the one there is.
type ConnOption interface{ applyConn(*connSettings) }

type connSettings struct{ auth Auth }

// Auth is how a client proves who it is to the NATS server, and where it
// keeps its replies. The zero Auth connects as the URL says (anonymous, or
// user and password or token in the URL) with the default inbox prefix.
type Auth struct {
	// Identity is who connects (internal/auth names them coordinator,
	// voter, judge, admin, approver, tenant-<T>): its replies arrive under
	// _INBOX.<Identity>, the only inbox its permissions let it read.
	// Default: the base name of NKey or Creds without its extension
	// ("secrets/voter.nk" is voter), else none (inbox prefix _INBOX).
	Identity string
	// Creds is a JWT user credentials file (operator mode). Default none.
	Creds string
	// NKey is an nkey seed file (maker auth init writes <identity>.nk).
	// Default none.
	NKey string
	// TLSCert and TLSKey are the client's certificate and key for mutual
	// TLS; TLSCA the CA that signed the server's certificate. Default none:
	// TLS only if the URL is tls:// or the server requires it, verified
	// against the system's roots.
	TLSCert, TLSKey, TLSCA string
	// OnViolation is called with each permission violation the server
	// reports on the connection (ErrPermission wrapped, naming the
	// subject). Default: none; Connect remembers the latest anyway (see
	// LastViolation).
	OnViolation func(error)
}

func (a Auth) applyConn(s *connSettings) { s.auth = a }

var identityRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// IdentityName returns the identity a's connection uses: Identity, else the
// name of its NKey or Creds file without extension, else "".
func (a Auth) IdentityName() string {
	if a.Identity != "" {
		return a.Identity
	}
	for _, f := range []string{a.NKey, a.Creds} {
		if f != "" {
			b := filepath.Base(f)
			return strings.TrimSuffix(b, filepath.Ext(b))
		}
	}
	return ""
}

// Validate checks that a can be used: one of Creds and NKey, TLSCert and
// TLSKey together, an identity usable as an inbox token.
func (a Auth) Validate() error {
	if a.Creds != "" && a.NKey != "" {
		return fmt.Errorf("%w: give a creds file or an nkey seed, not both", ErrConnOptions)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return fmt.Errorf("%w: a TLS client certificate needs its key and the other way round", ErrConnOptions)
	}
	if id := a.IdentityName(); id != "" && !identityRE.MatchString(id) {
		return fmt.Errorf("%w: identity %q must be 1-64 of A-Z, a-z, 0-9, '_' and '-'", ErrConnOptions, id)
	}
	return nil
}

// InboxPrefix is the prefix of the connection's reply subjects.
func (a Auth) InboxPrefix() string {
	if id := a.IdentityName(); id != "" {
		return nats.InboxPrefix + id
	}
	return strings.TrimSuffix(nats.InboxPrefix, ".")
}

// options are the nats.go options a stands for.
func (a Auth) options() []nats.Option {
	var o []nats.Option
	if id := a.IdentityName(); id != "" {
		o = append(o, nats.CustomInboxPrefix(a.InboxPrefix()))
	}
	if a.Creds != "" {
		o = append(o, nats.UserCredentials(a.Creds))
	}
	if a.NKey != "" {
		// Read at connect (and each reconnect) by nats.go; a missing file
		// fails Connect with the path named.
		opt, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			o = append(o, func(*nats.Options) error { return fmt.Errorf("nkey seed %s: %w", a.NKey, err) })
		} else {
			o = append(o, opt)
		}
	}
	if a.TLSCert != "" {
		o = append(o, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	if a.TLSCA != "" {
		o = append(o, nats.RootCAs(a.TLSCA))
	}
	return o
}

// Connect dials url and keeps reconnecting for as long as the process
// lives. name identifies the connection in server monitoring; opts say how
// it authenticates (Auth). Errors and logs never show the password or token
// of url (RedactURL).
func Connect(url, name string, opts ...ConnOption) (*nats.Conn, error) {
	var s connSettings
	for _, o := range opts {
		if o != nil {
			o.applyConn(&s)
		}
	}
	if err := s.auth.Validate(); err != nil {
		return nil, err
	}
	v := &violations{on: s.auth.OnViolation}
	nopts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(false),
		nats.ErrorHandler(v.handle),
	}, s.auth.options()...)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect %s: %w", RedactURL(url), redactErr(url, err))
	}
	v.auth = s.auth
	connViolations.Store(nc, v)
	nc.SetClosedHandler(func(nc *nats.Conn) { connViolations.Delete(nc) })
	return nc, nil
}

// SameAuthAs connects with the Auth nc was opened with (by Connect): the
// roles of an in-process fleet join as the fleet's own connection did.
// Nothing when nc was not opened by Connect or is closed.
func SameAuthAs(nc *nats.Conn) ConnOption {
	if x, ok := connViolations.Load(nc); ok {
		return x.(*violations).auth
	}
	return nil
}

type authKey struct{}

// ContextWithAuth returns ctx carrying a, for AuthFromContext: how the
// command line hands its --nats-* flags to everything a command connects.
func ContextWithAuth(ctx context.Context, a Auth) context.Context {
	return context.WithValue(ctx, authKey{}, a)
}

// AuthFromContext returns the Auth ctx carries (ContextWithAuth), or the
// zero Auth.
func AuthFromContext(ctx context.Context) Auth {
	a, _ := ctx.Value(authKey{}).(Auth)
	return a
}

// connViolations holds each open connection's Auth and violations, for
// SameAuthAs and LastViolation.
var connViolations sync.Map // *nats.Conn -> *violations

type violations struct {
	auth Auth
	on   func(error)
	mu   sync.Mutex
	last error
	// watchers are WatchViolations' callbacks, by registration.
	watchers map[*int]func(subject string, err error)
}

var violationRE = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "?([^"\s]+)"?(?: using queue "?([^"\s]+)"?)?`)

// PermissionError turns a nats.go permission violation into ErrPermission
// naming the action and subject ("permission denied: publish to x"); other
// errors come back as they are.
func PermissionError(err error) error {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return err
	}
	m := violationRE.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("%w: %w", ErrPermission, err)
	}
	what := "publish to"
	if strings.EqualFold(m[1], "subscription") {
		what = "subscribe to"
	}
	return fmt.Errorf("%w: %s %s", ErrPermission, what, m[2])
}

func (v *violations) handle(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	perr := PermissionError(err)
	subject := ""
	if m := violationRE.FindStringSubmatch(err.Error()); m != nil {
		subject = m[2]
	}
	v.mu.Lock()
	v.last = perr
	watchers := make([]func(string, error), 0, len(v.watchers))
	for _, fn := range v.watchers {
		watchers = append(watchers, fn)
	}
	v.mu.Unlock()
	if v.on != nil {
		v.on(perr)
	}
	for _, fn := range watchers {
		fn(subject, perr)
	}
}

// WatchViolations calls fn with the subject and error (wrapping
// ErrPermission) of each permission violation the server reports on nc
// from now until stop is called: a service sharing one connection among
// many requests can end the one whose reads the server refuses at once,
// instead of letting it wait for its timeout (nats.go reports a refused
// publish apart from the request that made it). fn runs on nats.go's
// error goroutine and must not block. Nothing is watched when nc was not
// opened by Connect or is closed.
func WatchViolations(nc *nats.Conn, fn func(subject string, err error)) (stop func()) {
	x, ok := connViolations.Load(nc)
	if !ok {
		return func() {}
	}
	v := x.(*violations)
	id := new(int)
	v.mu.Lock()
	if v.watchers == nil {
		v.watchers = map[*int]func(string, error){}
	}
	v.watchers[id] = fn
	v.mu.Unlock()
	return func() {
		v.mu.Lock()
		delete(v.watchers, id)
		v.mu.Unlock()
	}
}

// LastViolation returns the latest permission violation the server
// reported on nc (wrapping ErrPermission), or nil. nc must have been opened
// by Connect and not yet closed.
func LastViolation(nc *nats.Conn) error {
	x, ok := connViolations.Load(nc)
	if !ok {
		return nil
	}
	v := x.(*violations)
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
}

// RedactURL returns the NATS URL (or comma-separated URLs) with passwords
// and tokens replaced by "REDACTED": what may be printed or logged.
func RedactURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = redactOne(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactOne(raw string) string {
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return raw
	}
	scheme := ""
	rest := raw[:at]
	if i := strings.Index(rest, "://"); i >= 0 {
		scheme, rest = rest[:i+3], rest[i+3:]
	}
	if strings.ContainsAny(rest, "/?#") {
		// An '@' in the path or query: no user info to hide.
		return raw
	}
	user, _, hasPass := strings.Cut(rest, ":")
	if !hasPass {
		// A lone user part is a token.
		return scheme + "REDACTED" + raw[at:]
	}
	if u, err := url.PathUnescape(user); err == nil {
		user = u
	}
	return scheme + url.PathEscape(user) + ":REDACTED" + raw[at:]
}

// redactErr removes url's secrets from err's text, if they appear there
// (nats.go errors may quote the server URL).
func redactErr(raw string, err error) error {
	msg := err.Error()
	clean := msg
	for _, p := range strings.Split(raw, ",") {
		p = strings.TrimSpace(p)
		if r := redactOne(p); r != p {
			clean = strings.ReplaceAll(clean, p, r)
			for _, s := range secretsOf(p) {
				clean = strings.ReplaceAll(clean, s, "REDACTED")
			}
		}
	}
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, err: err}
}

// secretsOf lists the password or token of one URL, raw and unescaped.
func secretsOf(raw string) []string {
	at := strings.LastIndex(raw, "@")
	rest := raw[:at]
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	user, pass, hasPass := strings.Cut(rest, ":")
	secret := pass
	if !hasPass {
		secret = user
	}
	out := []string{secret}
	if u, err := url.PathUnescape(secret); err == nil && u != secret {
		out = append(out, u)
	}
	var keep []string
	for _, s := range out {
		if len(s) >= 3 { // replacing "a" everywhere would garble the message
			keep = append(keep, s)
		}
	}
	return keep
}

// redactedError is err with a message that hides a secret; errors.Is and
// As still see err.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
