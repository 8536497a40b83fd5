package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// Store errors.
var (
	// ErrInvalid: a deployment that does not validate.
	ErrInvalid = errors.New("providers: invalid deployment")
	// ErrNotFound: no deployment of that name.
	ErrNotFound = errors.New("providers: no such deployment")
	// ErrNoBucket: a topology without the provider registry.
	ErrNoBucket = errors.New("providers: no provider registry")
)

// MaxFileBytes bounds a providers file.
const MaxFileBytes = 1 << 20

// Set stores d under its name, replacing the record before: it fills
// the header and UpdatedAt, validates, and returns what it stored.
func Set(ctx context.Context, kv jetstream.KeyValue, d schemas.Deployment) (schemas.Deployment, error) {
	if kv == nil {
		return d, ErrNoBucket
	}
	d.Header = schemas.NewHeader(schemas.KindDeployment)
	d.UpdatedAt = time.Now().UTC()
	data, err := schemas.Encode(&d)
	if err != nil {
		return d, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := kv.Put(ctx, d.Name, data); err != nil {
		return d, fmt.Errorf("providers: store %s: %w", d.Name, err)
	}
	return d, nil
}

// Get reads the deployment name; ErrNotFound when there is none.
func Get(ctx context.Context, kv jetstream.KeyValue, name string) (schemas.Deployment, error) {
	if kv == nil {
		return schemas.Deployment{}, ErrNoBucket
	}
	if !schemas.ValidDeploymentName(name) {
		return schemas.Deployment{}, fmt.Errorf("%w %q", ErrNotFound, name)
	}
	e, err := kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return schemas.Deployment{}, fmt.Errorf("%w %q", ErrNotFound, name)
	}
	if err != nil {
		return schemas.Deployment{}, fmt.Errorf("providers: read %s: %w", name, err)
	}
	return record(e)
}

// record decodes an entry, which must hold the deployment its key names.
func record(e jetstream.KeyValueEntry) (schemas.Deployment, error) {
	name := e.Key()
	d, err := decode(e.Value())
	if err != nil {
		return schemas.Deployment{}, fmt.Errorf("providers: record %s: %w", name, err)
	}
	if d.Name != name {
		return schemas.Deployment{}, fmt.Errorf("providers: record %s holds deployment %q", name, d.Name)
	}
	return d, nil
}

// Delete removes the deployment name; ErrNotFound when there is none.
func Delete(ctx context.Context, kv jetstream.KeyValue, name string) error {
	if _, err := Get(ctx, kv, name); err != nil {
		return err
	}
	if err := kv.Delete(ctx, name); err != nil {
		return fmt.Errorf("providers: remove %s: %w", name, err)
	}
	return nil
}

// List reads every deployment, by name. Unreadable records are left out
// and named in the error returned with the rest.
func List(ctx context.Context, kv jetstream.KeyValue) ([]schemas.Deployment, error) {
	if kv == nil {
		return nil, ErrNoBucket
	}
	out, err := bus.ReadAll(ctx, kv, record)
	if err != nil {
		err = fmt.Errorf("providers: %w", err)
	}
	sortByName(out)
	return out, err
}

func sortByName(ds []schemas.Deployment) {
	slices.SortFunc(ds, func(a, b schemas.Deployment) int { return strings.Compare(a.Name, b.Name) })
}

func decode(data []byte) (schemas.Deployment, error) {
	var d schemas.Deployment
	err := schemas.Decode(data, &d)
	return d, err
}

// NewMirror is the registry kept in memory through the bucket's watch,
// for a Router's Source.
func NewMirror(kv jetstream.KeyValue) *bus.Mirror[schemas.Deployment] {
	return bus.NewMirror(kv, decode)
}

// ReadFile reads a providers file: {"deployments": [...]} as maker
// providers list --json writes it, each checked (header and updated_at
// may be left out), names unique. At most MaxFileBytes.
func ReadFile(path string) ([]schemas.Deployment, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("providers: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("providers: read %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrInvalid, path, MaxFileBytes)
	}
	return ParseFile(data)
}

// ParseFile parses a providers file's contents (ReadFile).
func ParseFile(data []byte) ([]schemas.Deployment, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var list schemas.DeploymentList
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("%w: providers file: %w", ErrInvalid, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: providers file: data after the object", ErrInvalid)
	}
	seen := map[string]bool{}
	for i := range list.Deployments {
		d := &list.Deployments[i]
		if err := d.Check(); err != nil {
			return nil, fmt.Errorf("%w: deployment %d: %w", ErrInvalid, i+1, err)
		}
		if seen[d.Name] {
			return nil, fmt.Errorf("%w: deployment %d: name %q given twice", ErrInvalid, i+1, d.Name)
		}
		seen[d.Name] = true
		d.Header = schemas.NewHeader(schemas.KindDeployment)
	}
	sortByName(list.Deployments)
	return list.Deployments, nil
}
