package providers

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/makerfleet/makerfleet/schemas"
)

// ErrNoKey: the voter cannot find a deployment's key where its record
// says (the variable is unset, the file unreadable or empty).
var ErrNoKey = errors.New("providers: API key not found on this voter")

// maxKeyBytes bounds a key file.
const maxKeyBytes = 8 << 10

// KeySource reads keys: Getenv and Open are os.Getenv and os.Open unless
// set (tests).
type KeySource struct {
	Getenv func(string) string
	Open   func(string) (io.ReadCloser, error)
}

// Key finds d's API key on this machine: the variable APIKeyEnv names,
// or the first line of APIKeyFile; "" when the record names neither.
func (ks KeySource) Key(d *schemas.Deployment) (string, error) {
	switch {
	case d.APIKeyEnv != "":
		getenv := ks.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		k := strings.TrimSpace(getenv(d.APIKeyEnv))
		if k == "" {
			return "", fmt.Errorf("%w: $%s is not set (deployment %s)", ErrNoKey, d.APIKeyEnv, d.Name)
		}
		return k, nil
	case d.APIKeyFile != "":
		open := ks.Open
		if open == nil {
			open = func(p string) (io.ReadCloser, error) { return os.Open(p) }
		}
		f, err := open(d.APIKeyFile)
		if err != nil {
			return "", fmt.Errorf("%w: deployment %s: %w", ErrNoKey, d.Name, err)
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, maxKeyBytes+1))
		if err != nil {
			return "", fmt.Errorf("%w: deployment %s: read %s: %w", ErrNoKey, d.Name, d.APIKeyFile, err)
		}
		if len(data) > maxKeyBytes {
			return "", fmt.Errorf("%w: deployment %s: %s is over %d bytes, not a key", ErrNoKey, d.Name, d.APIKeyFile, maxKeyBytes)
		}
		k, _, _ := strings.Cut(string(data), "\n")
		if k = strings.TrimSpace(k); k == "" {
			return "", fmt.Errorf("%w: deployment %s: %s is empty", ErrNoKey, d.Name, d.APIKeyFile)
		}
		return k, nil
	}
	return "", nil
}
