package voter

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/makerfleet/makerfleet/schemas"
)

// Policy defaults.
const (
	// DefaultMaxTokensCeiling is the largest max_output_tokens a request
	// may ask for by default: five times a job's default limit (750).
	DefaultMaxTokensCeiling = 4096
	// DefaultTemperatureMax is the highest temperature a request may ask
	// for by default. MAKER samples at 0 and 0.1 (a job's defaults).
	DefaultTemperatureMax = 1.0
	// AnyModel, in Policy.AllowModels, lets a request name any model. For
	// a fleet whose every client is trusted, or a simulated model that
	// serves every name; never for a paid key on a shared fleet.
	AnyModel = "*"
)

// maxPolicyTemperature is the highest temperature a sample request may
// carry at all (schemas).
const maxPolicyTemperature = 2

// Policy bounds what a sample request may make this voter ask of its model
// server, with the voter's own key: a request is data anyone able to
// publish on the samples stream could have written. A request outside the
// policy is refused before the model is called: it is logged and answered
// as the red flag "policy" (see Voter), so a step no voter may answer
// reaches its sample cap instead of waiting.
type Policy struct {
	// AllowModels are the models a request may name besides the voter's
	// own (Config.Model; a request naming no model asks for that one).
	// AnyModel ("*") allows every name. Default none: only the voter's own
	// model. A job's escalation model (its stronger_model) must be listed
	// on the voters that are to answer for it.
	AllowModels []string
	// MaxTokensCeiling is the largest max_output_tokens a request may ask
	// for (sent to the model as max_tokens). Default 4096.
	MaxTokensCeiling int
	// TemperatureMax is the highest temperature a request may ask for; the
	// lowest is 0. At most 2. Default 1.
	TemperatureMax float64
}

func (p *Policy) defaults() error {
	if p.MaxTokensCeiling == 0 {
		p.MaxTokensCeiling = DefaultMaxTokensCeiling
	}
	if p.TemperatureMax == 0 {
		p.TemperatureMax = DefaultTemperatureMax
	}
	switch {
	case p.MaxTokensCeiling < 1:
		return fmt.Errorf("%w: Policy.MaxTokensCeiling must be >= 1, got %d", ErrConfig, p.MaxTokensCeiling)
	case math.IsNaN(p.TemperatureMax) || p.TemperatureMax < 0 || p.TemperatureMax > maxPolicyTemperature:
		return fmt.Errorf("%w: Policy.TemperatureMax must be between 0 and %d, got %v", ErrConfig, maxPolicyTemperature, p.TemperatureMax)
	}
	for _, m := range p.AllowModels {
		if strings.TrimSpace(m) == "" {
			return fmt.Errorf("%w: Policy.AllowModels holds an empty name", ErrConfig)
		}
	}
	p.AllowModels = slices.Clone(p.AllowModels)
	return nil
}

// ErrPolicy wraps every refusal of Policy.Check.
var ErrPolicy = errors.New("voter: request outside the model policy")

// Check returns nil for a request within p, for a voter whose own model is
// own; otherwise an error wrapping ErrPolicy that names everything the
// request asked beyond it. p must have its defaults (New applies them).
func (p *Policy) Check(req *schemas.SampleRequest, own string) error {
	var why []string
	if req.Model != "" && req.Model != own && !slices.Contains(p.AllowModels, req.Model) && !slices.Contains(p.AllowModels, AnyModel) {
		why = append(why, fmt.Sprintf("model %q is not allowed", truncate(req.Model, 64)))
	}
	if req.MaxOutputTokens > p.MaxTokensCeiling {
		why = append(why, fmt.Sprintf("max_output_tokens %d is above the ceiling %d", req.MaxOutputTokens, p.MaxTokensCeiling))
	}
	if !(req.Temperature >= 0 && req.Temperature <= p.TemperatureMax) { // NaN too
		why = append(why, fmt.Sprintf("temperature %v is outside [0, %v]", req.Temperature, p.TemperatureMax))
	}
	for _, m := range req.Also { // a wave's samples, each at its own
		if t := req.Temp(m); !(t >= 0 && t <= p.TemperatureMax) {
			why = append(why, fmt.Sprintf("sample %d's temperature %v is outside [0, %v]", m.Index, t, p.TemperatureMax))
			break
		}
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrPolicy, strings.Join(why, "; "))
}
