package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// SeedExt ends the name of every identity's seed file: <identity>.nk, so
// the file names its identity (bus.Auth.IdentityName).
const SeedExt = ".nk"

// ConfigFile is the authorization block Init writes next to the seeds.
const ConfigFile = "auth.conf"

// ErrInit: Init could not be done as asked.
var ErrInit = errors.New("auth: init")

// InitConfig says where and for whom Init works. Zero fields take the
// documented defaults.
type InitConfig struct {
	// Dir holds the seeds and auth.conf; created 0700 if missing.
	// Required.
	Dir string
	// Namespace of the fleet the permissions are for. Default
	// bus.DefaultNamespace.
	Namespace bus.Namespace
	// Force makes new seeds for every identity, replacing existing ones
	// (a rotation: every client needs its new seed). Default false: seeds
	// that exist are kept.
	Force bool
}

// Identity is one identity Init wrote or kept.
type Identity struct {
	Name string `json:"name"`
	// PublicKey is the nkey user's public key (U...), as auth.conf names it.
	PublicKey string `json:"public_key"`
	// SeedFile is the path of its seed (0600).
	SeedFile string `json:"seed_file"`
	// Created is true when this run made the seed, false when it was kept.
	Created     bool        `json:"created"`
	Permissions Permissions `json:"permissions"`
}

// InitResult is what Init did.
type InitResult struct {
	Namespace  bus.Namespace `json:"namespace"`
	ConfigFile string        `json:"config_file"`
	Identities []Identity    `json:"identities"`
	// FormerTenantSeeds are seeds of tenant identities an earlier release
	// made (tenant-<T>.nk) found in Dir: auth.conf no longer names them,
	// so they connect to nothing; delete them.
	FormerTenantSeeds []string `json:"former_tenant_seeds,omitempty"`
}

// Init makes (or completes) Dir: a seed per identity (Roles) and
// auth.conf granting each its PermissionsOf. It can be run again: missing
// identities are added, existing seeds kept (unless Force), auth.conf
// rewritten. Tenants get no identity: they use maker serve's API keys.
func Init(cfg InitConfig) (InitResult, error) {
	if cfg.Dir == "" {
		return InitResult{}, fmt.Errorf("%w: a directory is required", ErrInit)
	}
	if err := cfg.Namespace.Validate(); err != nil {
		return InitResult{}, fmt.Errorf("%w: %w", ErrInit, err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return InitResult{}, fmt.Errorf("%w: %w", ErrInit, err)
	}
	former, err := filepath.Glob(filepath.Join(cfg.Dir, formerTenantPrefix+"*"+SeedExt))
	if err != nil {
		return InitResult{}, fmt.Errorf("%w: %w", ErrInit, err)
	}
	slices.Sort(former)
	res := InitResult{Namespace: bus.Namespace(cfg.Namespace.String()), ConfigFile: filepath.Join(cfg.Dir, ConfigFile),
		FormerTenantSeeds: former}
	for _, id := range Roles {
		ident, err := seed(cfg.Dir, id, cfg.Force)
		if err != nil {
			return InitResult{}, err
		}
		if ident.Permissions, err = PermissionsOf(cfg.Namespace, id); err != nil {
			return InitResult{}, err
		}
		res.Identities = append(res.Identities, ident)
	}
	if err := writeFile(res.ConfigFile, RenderConfig(res), 0o600); err != nil {
		return InitResult{}, err
	}
	return res, nil
}

// seed reads identity's seed from dir, or makes it.
func seed(dir, identity string, force bool) (Identity, error) {
	path := filepath.Join(dir, identity+SeedExt)
	ident := Identity{Name: identity, SeedFile: path}
	if !force {
		data, err := os.ReadFile(path)
		switch {
		case err == nil:
			kp, err := nkeys.FromSeed(bytes.TrimSpace(data))
			if err != nil {
				return Identity{}, fmt.Errorf("%w: %s is not an nkey seed (remove it, or run with --force): %w", ErrInit, path, err)
			}
			defer kp.Wipe()
			if ident.PublicKey, err = kp.PublicKey(); err != nil {
				return Identity{}, fmt.Errorf("%w: %s: %w", ErrInit, path, err)
			}
			if !strings.HasPrefix(ident.PublicKey, "U") {
				return Identity{}, fmt.Errorf("%w: %s is not a user nkey seed", ErrInit, path)
			}
			return ident, nil
		case !errors.Is(err, fs.ErrNotExist):
			return Identity{}, fmt.Errorf("%w: %w", ErrInit, err)
		}
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrInit, err)
	}
	defer kp.Wipe()
	s, err := kp.Seed()
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrInit, err)
	}
	if ident.PublicKey, err = kp.PublicKey(); err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrInit, err)
	}
	if err := writeFile(path, append(s, '\n'), 0o600); err != nil {
		return Identity{}, err
	}
	ident.Created = true
	return ident, nil
}

// writeFile replaces path with data, atomically, with mode perm (also
// when path existed with a wider one).
func writeFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInit, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("%w: %w", ErrInit, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("%w: %w", ErrInit, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("%w: %w", ErrInit, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("%w: %w", ErrInit, err)
	}
	return nil
}

// RenderConfig writes res's identities as a nats-server authorization
// block, to include in nats-server.conf. Subjects are quoted JSON strings:
// unquoted, the config parser would read $JS... as a variable.
func RenderConfig(res InitResult) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Generated by `maker auth init` for namespace %q: one nkey user per identity of\n", res.Namespace.String())
	b.WriteString("# the fleet, with the least privilege it needs (docs/security.md). Include it in\n")
	b.WriteString("# nats-server.conf (`include ./auth.conf`, next to `jetstream {}`); re-run\n")
	b.WriteString("# `maker auth init` rather than editing it. Tenants have no NATS identity: they use\n")
	b.WriteString("# maker serve with API keys.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, id := range res.Identities {
		fmt.Fprintf(&b, "    # %s\n", id.Name)
		fmt.Fprintf(&b, "    {\n      nkey: %s\n      permissions: {\n", id.PublicKey)
		rules := func(name string, r Rules) {
			fmt.Fprintf(&b, "        %s: {\n", name)
			list := func(key string, subjects []string) {
				if len(subjects) == 0 {
					return
				}
				fmt.Fprintf(&b, "          %s: [\n", key)
				for _, s := range subjects {
					q := strconv.Quote(s) // never \u: the parser knows only \xXX
					fmt.Fprintf(&b, "            %s\n", q)
				}
				b.WriteString("          ]\n")
			}
			list("allow", r.Allow)
			list("deny", r.Deny)
			b.WriteString("        }\n")
		}
		rules("publish", id.Permissions.Publish)
		rules("subscribe", id.Permissions.Subscribe)
		if id.Permissions.AllowResponses {
			b.WriteString("        allow_responses: true\n")
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.Bytes()
}
