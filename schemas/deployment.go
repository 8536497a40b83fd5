package schemas

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// KindDeployment is the kind of one record of the fleet's provider
// registry (bucket maker_providers).
const KindDeployment = "deployment"

// Bounds of a deployment record.
const (
	// MaxDeploymentRPM and MaxDeploymentTPM bound a deployment's limits
	// per minute: far above any provider's tier.
	MaxDeploymentRPM = 10_000_000
	MaxDeploymentTPM = 10_000_000_000
	// MaxDeploymentConcurrency bounds the calls one voter keeps in flight
	// on one deployment.
	MaxDeploymentConcurrency = 10_000
	maxDeploymentURL         = 2048
)

// deploymentNameRE is a deployment's name: a bucket key, a metric label
// and a word in logs, so short, lower case and plain.
var deploymentNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// keyEnvRE is an API key's variable name. It must end in _KEY or _TOKEN,
// so a record cannot have a voter send its other secrets (the NATS
// password, a Redis URL) to a model server as the key.
var keyEnvRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,126}_(KEY|TOKEN)$`)

// Deployment is one place a model is served: a provider's endpoint, the
// key it takes, what it costs and how much it may be asked. Voters use
// the deployments serving the model a sample request names, sharing each
// one's limits fleet-wide, and fail over between them. Only the operator
// writes the registry (maker providers set); the key itself is never in
// it, only where a voter finds it.
type Deployment struct {
	Header
	// Name identifies the deployment: 1 to 63 of a-z, 0-9, '_', '.', '-',
	// starting with a letter or digit.
	Name string `json:"name"`
	// BaseURL of its OpenAI-compatible API including the version prefix,
	// e.g. https://api.openai.com/v1: http or https, at most 2048 bytes.
	BaseURL string `json:"base_url"`
	// APIKeyEnv names the environment variable holding the key on the
	// voters' machines (ending in _KEY or _TOKEN). At most one of it and
	// APIKeyFile; neither: no key is sent (a local server).
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// APIKeyFile is a file holding the key on the voters' machines (an
	// absolute path; its first line).
	APIKeyFile string `json:"api_key_file,omitempty"`
	// Model is the model it serves, as jobs and voters name it.
	Model string `json:"model"`
	// ProviderModel is the name the provider knows the model by (an Azure
	// deployment, an OpenRouter path), sent in every call; default Model.
	ProviderModel string `json:"provider_model,omitempty"`
	// InputUSDPerMTok prices prompt tokens, in US dollars per million.
	InputUSDPerMTok float64 `json:"input_usd_per_mtok" jsonschema:"minimum=0,maximum=10000"`
	// CachedInputUSDPerMTok prices prompt tokens the provider served
	// from its cache (at most InputUSDPerMTok).
	CachedInputUSDPerMTok float64 `json:"cached_input_usd_per_mtok,omitempty" jsonschema:"minimum=0,maximum=10000"`
	// OutputUSDPerMTok prices completion tokens.
	OutputUSDPerMTok float64 `json:"output_usd_per_mtok" jsonschema:"minimum=0,maximum=10000"`
	// RPM is the deployment's requests per minute, shared by every
	// voter (0: no limit).
	RPM int64 `json:"rpm,omitempty" jsonschema:"minimum=0"`
	// TPM is its tokens per minute (prompt and completion), shared by
	// every voter (0: no limit).
	TPM int64 `json:"tpm,omitempty" jsonschema:"minimum=0"`
	// Concurrency bounds the calls one voter keeps in flight on it (0: the
	// voter's own concurrency).
	Concurrency int `json:"concurrency,omitempty" jsonschema:"minimum=0"`
	// SupportsN: it answers a call's n > 1 with n choices.
	SupportsN bool `json:"supports_n,omitempty"`
	// Disabled keeps the record but sends it no calls.
	Disabled bool `json:"disabled,omitempty"`
	// UpdatedAt is when the record was set.
	UpdatedAt time.Time `json:"updated_at"`
}

// MessageKind implements Message.
func (*Deployment) MessageKind() string { return KindDeployment }

// Validate implements Message.
func (d *Deployment) Validate() error {
	const k = KindDeployment
	if err := d.Header.check(k); err != nil {
		return err
	}
	return d.Check()
}

// Check validates the record's fields (not its header): what maker
// providers set and a providers file are checked with.
func (d *Deployment) Check() error {
	const k = KindDeployment
	if !deploymentNameRE.MatchString(d.Name) {
		return invalid(k, "name %q: want 1 to 63 of a-z, 0-9, '_', '.', '-', starting with a letter or digit", truncateField(d.Name))
	}
	if err := checkBaseURL(d.BaseURL); err != nil {
		return invalid(k, "deployment %s: %v", d.Name, err)
	}
	if d.APIKeyEnv != "" && d.APIKeyFile != "" {
		return invalid(k, "deployment %s: give api_key_env or api_key_file, not both", d.Name)
	}
	if d.APIKeyEnv != "" && !keyEnvRE.MatchString(d.APIKeyEnv) {
		return invalid(k, "deployment %s: api_key_env %q: want an upper-case variable name ending in _KEY or _TOKEN (the key itself is never stored)",
			d.Name, truncateField(d.APIKeyEnv))
	}
	if f := d.APIKeyFile; f != "" {
		if len(f) > 1024 || !filepath.IsAbs(f) || filepath.Clean(f) != f || strings.ContainsAny(f, "\x00\n\r") {
			return invalid(k, "deployment %s: api_key_file %q: want a clean absolute path", d.Name, truncateField(f))
		}
	}
	if err := CheckModelName(d.Model); err != nil {
		return invalid(k, "deployment %s: model: %v", d.Name, err)
	}
	if d.ProviderModel != "" {
		if err := CheckModelName(d.ProviderModel); err != nil {
			return invalid(k, "deployment %s: provider_model: %v", d.Name, err)
		}
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"input_usd_per_mtok", d.InputUSDPerMTok}, {"cached_input_usd_per_mtok", d.CachedInputUSDPerMTok}, {"output_usd_per_mtok", d.OutputUSDPerMTok}} {
		if !inRange(p.v, 0, MaxModelPriceUSDPerMTok) {
			return invalid(k, "deployment %s: %s must be between 0 and %d, got %v", d.Name, p.name, MaxModelPriceUSDPerMTok, p.v)
		}
	}
	if d.CachedInputUSDPerMTok > d.InputUSDPerMTok {
		return invalid(k, "deployment %s: cached_input_usd_per_mtok %v above input_usd_per_mtok %v", d.Name, d.CachedInputUSDPerMTok, d.InputUSDPerMTok)
	}
	switch {
	case d.RPM < 0 || d.RPM > MaxDeploymentRPM:
		return invalid(k, "deployment %s: rpm must be between 0 and %d, got %d", d.Name, MaxDeploymentRPM, d.RPM)
	case d.TPM < 0 || d.TPM > MaxDeploymentTPM:
		return invalid(k, "deployment %s: tpm must be between 0 and %d, got %d", d.Name, int64(MaxDeploymentTPM), d.TPM)
	case d.Concurrency < 0 || d.Concurrency > MaxDeploymentConcurrency:
		return invalid(k, "deployment %s: concurrency must be between 0 and %d, got %d", d.Name, MaxDeploymentConcurrency, d.Concurrency)
	}
	return nil
}

// ValidDeploymentName reports whether name is a deployment's name.
func ValidDeploymentName(name string) bool { return deploymentNameRE.MatchString(name) }

// Upstream is the model name sent to the provider.
func (d *Deployment) Upstream() string {
	if d.ProviderModel != "" {
		return d.ProviderModel
	}
	return d.Model
}

// checkBaseURL accepts http(s)://host[:port]/path without credentials,
// query or fragment (the key goes in a header, never in the URL).
func checkBaseURL(s string) error {
	if s == "" || len(s) > maxDeploymentURL {
		return fmt.Errorf("base_url: want 1 to %d bytes", maxDeploymentURL)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("base_url: %v", err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("base_url %q: want http(s)://host[:port]/path", s)
	case u.User != nil:
		return fmt.Errorf("base_url: credentials in the URL; name the key with api_key_env or api_key_file")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("base_url %q: no query or fragment", s)
	}
	return nil
}

// DeploymentList is the provider registry as maker providers list and a
// providers file hold it: by name.
type DeploymentList struct {
	Deployments []Deployment `json:"deployments"`
}

func truncateField(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
