package voter

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

func TestPolicyDefaults(t *testing.T) {
	t.Parallel()
	var p Policy
	if err := p.defaults(); err != nil {
		t.Fatal(err)
	}
	if p.MaxTokensCeiling != DefaultMaxTokensCeiling || p.TemperatureMax != DefaultTemperatureMax || len(p.AllowModels) != 0 {
		t.Errorf("defaults %+v", p)
	}
	for _, bad := range []Policy{
		{MaxTokensCeiling: -1},
		{TemperatureMax: -0.5},
		{TemperatureMax: 2.5},
		{TemperatureMax: math.NaN()},
		{AllowModels: []string{"ok", " "}},
	} {
		if err := bad.defaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("policy %+v: err %v, want ErrConfig", bad, err)
		}
	}
}

func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	strict := Policy{}
	allow := Policy{AllowModels: []string{"big"}, MaxTokensCeiling: 200_000, TemperatureMax: 2}
	anyModel := Policy{AllowModels: []string{AnyModel}}
	for _, p := range []*Policy{&strict, &allow, &anyModel} {
		if err := p.defaults(); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		p     *Policy
		model string
		max   int
		temp  float64
		says  []string // nil: allowed
	}{
		{"own model by default", &strict, "", 750, 0.1, nil},
		{"own model by name", &strict, "own", 750, 0, nil},
		{"the ceiling itself", &strict, "", 4096, 1, nil},
		{"forged: everything at once", &strict, "openai/o1-pro", 200_000, 1.9,
			[]string{`model "openai/o1-pro" is not allowed`, "max_output_tokens 200000 is above the ceiling 4096", "temperature 1.9 is outside [0, 1]"}},
		{"another model", &strict, "big", 750, 0.1, []string{`model "big"`}},
		{"above the ceiling", &strict, "", 4097, 0.1, []string{"max_output_tokens 4097"}},
		{"too hot", &strict, "", 750, 1.5, []string{"temperature 1.5"}},
		{"negative temperature", &strict, "", 750, -0.1, []string{"temperature -0.1"}},
		{"NaN temperature", &strict, "", 750, math.NaN(), []string{"temperature NaN"}},
		{"an allowed model", &allow, "big", 200_000, 1.9, nil},
		{"not that one", &allow, "bigger", 750, 0.1, []string{`model "bigger"`}},
		{"any model", &anyModel, "openai/o1-pro", 750, 0.1, nil},
		{"any model, not any budget", &anyModel, "openai/o1-pro", 200_000, 0.1, []string{"max_output_tokens 200000"}},
		{"a long name is cut in the reason", &strict, strings.Repeat("m", 200), 750, 0.1, []string{strings.Repeat("m", 64) + "…"}},
	}
	for _, c := range cases {
		req := &schemas.SampleRequest{Model: c.model, MaxOutputTokens: c.max, Temperature: c.temp}
		err := c.p.Check(req, "own")
		if c.says == nil {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrPolicy) {
			t.Errorf("%s: err %v, want ErrPolicy", c.name, err)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", c.name, err, s)
			}
		}
	}
}
