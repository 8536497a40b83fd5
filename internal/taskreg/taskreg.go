// Package taskreg is the fleet-wide task registry: task specs
// (schemas.TaskSpec) stored in KV bucket maker_tasks under
// <name>.<version> as immutable records (schemas.TaskRecord: the source
// byte for byte and its content hash). Coordinators and voters load a
// job's task by the name, version and hash the job pinned, compiled once
// per hash; Registry is the task.Source that finds built-in tasks and
// registered specs alike.
//
// The registry compiles specs with the task.Compiler it is given
// (task/spec.CompileSpec); without one it pins specs (name, version, hash
// from their records) but cannot load or register them, and links no spec
// language: the public client's case.
package taskreg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/lru"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Sentinel errors.
var (
	// ErrConflict: name@version is registered with another spec; a
	// version is immutable, register a new one.
	ErrConflict = errors.New("taskreg: name@version taken by another spec")
	// ErrBuiltin: the name is a built-in task's.
	ErrBuiltin = errors.New("taskreg: the name of a built-in task")
	// ErrNotFound: no such task or version.
	ErrNotFound = errors.New("taskreg: unknown task")
	// ErrChanged: the registry holds another spec under name@version than
	// the hash a job pinned.
	ErrChanged = errors.New("taskreg: the registered spec is not the one the job pinned")
	// ErrNoCompiler: the registry was made without a task.Compiler, so it
	// can pin a spec but neither load nor register one.
	ErrNoCompiler = errors.New("taskreg: this program does not compile task specs")
)

// Registry finds tasks: the built-ins, and the specs registered in a
// bucket. It is safe for concurrent use.
type Registry struct {
	raw     jetstream.KeyValue
	kv      *bus.KV[schemas.TaskRecord]
	builtin *task.Registry
	compile task.Compiler // nil: specs are pinned, never loaded

	mu    sync.Mutex
	local map[string]task.Spec // added from files (Add), by name
	known map[string]bool      // hashes this registry has found or added
}

// compiled holds compiled specs by content hash for every registry in the
// process: a hash names one source, so the roles of an in-process fleet
// compile a spec once and share its bound instances (spec.Task.Bind). A
// registry still only serves the hashes it found in its own bucket (or was
// given), never another's.
var compiled = lru.New[string, task.Spec](64)

var _ task.Source = (*Registry)(nil)

// New returns the registry over bucket kv (nil: built-ins only), with
// builtin the tasks that ship and compile the spec compiler (nil: specs are
// pinned but not loaded, ErrNoCompiler).
func New(kv jetstream.KeyValue, builtin *task.Registry, compile task.Compiler) *Registry {
	r := &Registry{raw: kv, builtin: builtin, compile: compile, local: map[string]task.Spec{}, known: map[string]bool{}}
	if kv != nil {
		r.kv = bus.NewKV(kv, bus.MessageCodec[schemas.TaskRecord]())
	}
	return r
}

// Key is a spec's key in the bucket: <name>.<version>.
func Key(name, version string) string { return name + "." + version }

// ParseRef reads NAME or NAME@VERSION.
func ParseRef(s string) (name, version string, err error) {
	name, version, hasVersion := strings.Cut(s, "@")
	if name == "" || hasVersion && !schemas.ValidTaskSpecVersion(version) {
		return "", "", fmt.Errorf("%w: %q is not NAME or NAME@VERSION (a version is 1-32 of letters, digits, '.', '_' and '-')", task.ErrUnknownTask, s)
	}
	return name, version, nil
}

// Register compiles src and stores it as name@version. Registering the
// same spec again is no change (created false); another spec under a taken
// name@version is ErrConflict; an invalid spec is its spec.Errors; a
// built-in's name is ErrBuiltin.
func (r *Registry) Register(ctx context.Context, src []byte, by string) (rec schemas.TaskRecord, created bool, err error) {
	if r.kv == nil {
		return rec, false, errors.New("taskreg: no registry bucket")
	}
	if r.compile == nil {
		return rec, false, ErrNoCompiler
	}
	t, err := r.compile(src)
	if err != nil {
		return rec, false, err
	}
	if _, err := r.builtin.Lookup(t.Name()); err == nil {
		return rec, false, fmt.Errorf("%w: %q is built in; choose another name", ErrBuiltin, t.Name())
	}
	rec = schemas.TaskRecord{
		Header: schemas.NewHeader(schemas.KindTaskRecord), Name: t.Name(), TaskVersion: t.Version(),
		Hash: t.Hash(), Source: string(src), By: by, At: time.Now().UTC(),
	}
	key := Key(rec.Name, rec.TaskVersion)
	if _, err := r.kv.Create(ctx, key, &rec); err == nil {
		r.remember(t)
		return rec, true, nil
	} else if !errors.Is(err, bus.ErrConflict) {
		return rec, false, fmt.Errorf("taskreg: register %s@%s: %w", rec.Name, rec.TaskVersion, err)
	}
	cur, _, err := r.kv.Get(ctx, key)
	if err != nil {
		return rec, false, fmt.Errorf("taskreg: register %s@%s: %w", rec.Name, rec.TaskVersion, err)
	}
	if cur.Hash != rec.Hash {
		return *cur, false, fmt.Errorf("%w: %s@%s is registered as %s, this spec is %s; give it a new version",
			ErrConflict, rec.Name, rec.TaskVersion, cur.Hash, rec.Hash)
	}
	return *cur, false, nil
}

// Get returns the record of name@version; with no version, the highest
// release (CompareVersions: 1.10.0 after 1.9.0, whenever each was
// registered), or the highest pre-release (2.0.0-rc1) when there is no
// release.
func (r *Registry) Get(ctx context.Context, name, version string) (schemas.TaskRecord, error) {
	if r.kv == nil {
		return schemas.TaskRecord{}, fmt.Errorf("%w: %s (no registry)", ErrNotFound, name)
	}
	if version == "" {
		all, err := r.versions(ctx, name)
		if err != nil {
			return schemas.TaskRecord{}, err
		}
		if len(all) == 0 {
			return schemas.TaskRecord{}, fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		return Latest(all), nil
	}
	rec, _, err := r.kv.Get(ctx, Key(name, version))
	if errors.Is(err, bus.ErrNotFound) {
		return schemas.TaskRecord{}, fmt.Errorf("%w: %s@%s", ErrNotFound, name, version)
	}
	if err != nil {
		return schemas.TaskRecord{}, fmt.Errorf("taskreg: %w", err)
	}
	return *rec, nil
}

// Latest is the latest of one name's records in version order (as List
// gives them): the highest release, or the highest pre-release when there
// is no release, as Go's @latest picks.
func Latest(recs []schemas.TaskRecord) schemas.TaskRecord {
	for i := len(recs) - 1; i >= 0; i-- {
		if !strings.Contains(recs[i].TaskVersion, "-") {
			return recs[i]
		}
	}
	return recs[len(recs)-1]
}

// List returns every registered spec, by name, then version
// (CompareVersions).
func (r *Registry) List(ctx context.Context) ([]schemas.TaskRecord, error) {
	return r.versions(ctx, "")
}

// versions lists the records of name ("" for every name), lowest
// version first per name.
func (r *Registry) versions(ctx context.Context, name string) ([]schemas.TaskRecord, error) {
	if r.kv == nil {
		return nil, nil
	}
	lister, err := r.raw.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("taskreg: list: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var out []schemas.TaskRecord
	for key := range lister.Keys() {
		n, _, ok := strings.Cut(key, ".")
		if !ok || name != "" && n != name {
			continue
		}
		rec, _, err := r.kv.Get(ctx, key)
		if errors.Is(err, bus.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("taskreg: %w", err)
		}
		out = append(out, *rec)
	}
	slices.SortFunc(out, func(a, b schemas.TaskRecord) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if c := CompareVersions(a.TaskVersion, b.TaskVersion); c != 0 {
			return c
		}
		return a.At.Compare(b.At)
	})
	return out, nil
}

// ErrInUse: a registered spec a job not yet finished pins cannot be
// deleted.
var ErrInUse = errors.New("taskreg: in use")

// Delete removes name@version from the registry, unless inUse names a
// job not finished that pinned it (then ErrInUse, naming it). A job
// already finished keeps its report; a job submitted after cannot name
// the version. Deleting a version never registered is ErrNotFound.
func (r *Registry) Delete(ctx context.Context, name, version string, inUse func(ctx context.Context, hash string) (string, error)) error {
	rec, err := r.Get(ctx, name, version)
	if err != nil {
		return err
	}
	if job, err := inUse(ctx, rec.Hash); err != nil {
		return err
	} else if job != "" {
		return fmt.Errorf("%w: %s@%s is pinned by job %s, not finished (cancel it, or wait for it to end)", ErrInUse, name, version, job)
	}
	if err := r.raw.Delete(ctx, Key(name, version)); err != nil {
		return fmt.Errorf("taskreg: delete %s@%s: %w", name, version, err)
	}
	return nil
}

// Add makes t, a spec read from a file, known to this registry only (not
// stored): maker run --task-file and maker task test resolve it by its name
// before it is registered with their in-process fleet.
func (r *Registry) Add(t task.Spec) {
	r.remember(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.local[t.Name()] = t
}

// Resolve pins the task a job names: a built-in by its name, a spec by
// name and version (the latest registered when version is ""), with its
// hash.
func (r *Registry) Resolve(ctx context.Context, name, version string) (task.Ref, error) {
	if version == "" {
		if _, err := r.builtin.Lookup(name); err == nil {
			return task.Ref{Name: name}, nil
		}
	}
	r.mu.Lock()
	t := r.local[name]
	r.mu.Unlock()
	if t != nil && (version == "" || version == t.Version()) {
		return task.Ref{Name: t.Name(), Version: t.Version(), Hash: t.Hash()}, nil
	}
	rec, err := r.Get(ctx, name, version)
	if errors.Is(err, ErrNotFound) {
		return task.Ref{}, fmt.Errorf("%w %q (built in: %v; register a spec with maker task register)", task.ErrUnknownTask, refText(name, version), r.builtin.Names())
	}
	if err != nil {
		return task.Ref{}, err
	}
	return task.Ref{Name: rec.Name, Version: rec.TaskVersion, Hash: rec.Hash}, nil
}

func refText(name, version string) string {
	if version == "" {
		return name
	}
	return name + "@" + version
}

// Task implements task.Source: a built-in by name; a spec by name@version,
// checked against the hash the job pinned, compiled once per hash.
func (r *Registry) Task(ctx context.Context, ref task.Ref) (task.Task, error) {
	if ref.Version == "" {
		return r.builtin.Task(ctx, ref)
	}
	if t := r.compiled(ref.Hash); t != nil && t.Name() == ref.Name && t.Version() == ref.Version {
		return t, nil
	}
	rec, err := r.Get(ctx, ref.Name, ref.Version)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", task.ErrUnknownTask, err)
	}
	if ref.Hash != "" && rec.Hash != ref.Hash {
		return nil, fmt.Errorf("%w: %s holds %s, the job pinned %s", ErrChanged, ref.String(), rec.Hash, ref.Hash)
	}
	// A registry without a compiler loads nothing, even what another
	// registry of the process compiled: what it can do must not depend
	// on its neighbours.
	if r.compile == nil {
		return nil, fmt.Errorf("%w: %s is pinned at %s but not loaded here", ErrNoCompiler, ref.String(), rec.Hash)
	}
	// Found in this registry's bucket: another registry's compilation of
	// the same source will do.
	if t, ok := compiled.Get(rec.Hash); ok {
		r.remember(t)
		return t, nil
	}
	t, err := r.compile([]byte(rec.Source))
	if err != nil {
		return nil, fmt.Errorf("taskreg: registered spec %s: %w", ref.String(), err)
	}
	if t.Hash() != rec.Hash {
		return nil, fmt.Errorf("%w: %s's source hashes to %s, its record says %s", ErrChanged, ref.String(), t.Hash(), rec.Hash)
	}
	r.remember(t)
	return t, nil
}

func (r *Registry) compiled(hash string) task.Spec {
	if hash == "" {
		return nil
	}
	r.mu.Lock()
	known := r.known[hash]
	r.mu.Unlock()
	if !known {
		return nil
	}
	t, _ := compiled.Get(hash)
	return t
}

func (r *Registry) remember(t task.Spec) {
	r.mu.Lock()
	r.known[t.Hash()] = true
	r.mu.Unlock()
	compiled.Put(t.Hash(), t)
}
