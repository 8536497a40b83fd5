package cli

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestParseHardSteps: --hard-steps and --sim-hard-steps read
// FRACTION:ACCURACY, both in (0, 1]; anything else is a usage error that
// quotes the flag's value and says the form.
func TestParseHardSteps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		f, a float64
		ok   bool
	}{
		{"", 0, 0, true}, // none
		{"0.01:0.6", 0.01, 0.6, true},
		{"1:1", 1, 1, true},
		{"1e-4:0.999", 0.0001, 0.999, true},
		{".5:.25", 0.5, 0.25, true},

		{"0:0.5", 0, 0, false}, // no hard steps: leave the flag out
		{"-0.1:0.5", 0, 0, false},
		{"1.5:0.5", 0, 0, false},
		{"0.5:0", 0, 0, false},
		{"0.5:-0.2", 0, 0, false},
		{"0.5:1.01", 0, 0, false},
		{"NaN:0.5", 0, 0, false},
		{"0.5:NaN", 0, 0, false},
		{"Inf:0.5", 0, 0, false},
		{"0.5:+Inf", 0, 0, false},
		{"0.5", 0, 0, false},
		{"0.5:", 0, 0, false},
		{":0.5", 0, 0, false},
		{":", 0, 0, false},
		{"a:b", 0, 0, false},
		{"0.5:0.5:0.5", 0, 0, false},
		{" 0.5:0.5", 0, 0, false},
		{"0.5 : 0.5", 0, 0, false},
		{"0.5,0.6", 0, 0, false},
		{"0.5;0.6", 0, 0, false},
		{"50%:0.6", 0, 0, false},
	}
	for _, tt := range tests {
		f, a, err := parseHardSteps(tt.in)
		if tt.ok {
			if err != nil || f != tt.f || a != tt.a {
				t.Errorf("parseHardSteps(%q) = %v, %v, %v; want %v, %v", tt.in, f, a, err, tt.f, tt.a)
			}
			continue
		}
		var ue usageError
		if err == nil || !errors.As(err, &ue) || f != 0 || a != 0 {
			t.Errorf("parseHardSteps(%q) = %v, %v, %v; want a usage error", tt.in, f, a, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, strconv.Quote(tt.in)) || !strings.Contains(msg, "FRACTION:ACCURACY") {
			t.Errorf("parseHardSteps(%q): error %q should quote the value and say FRACTION:ACCURACY", tt.in, msg)
		}
	}
}

// TestSimFlagsConfig: the in-process fleet's --sim-wrong-spread and
// --sim-hard-steps reach the simulated model's config, and bad values are
// usage errors before anything starts.
func TestSimFlagsConfig(t *testing.T) {
	t.Parallel()
	sf := simFlags{accuracy: 0.99, wrongSpread: 1, hardSteps: "0.01:0.6"}
	cfg, err := sf.config(7)
	if err != nil || cfg.WrongSpread != 1 || cfg.HardFraction != 0.01 || cfg.HardAccuracy != 0.6 || cfg.Seed != 7 {
		t.Errorf("config = %+v, %v; want WrongSpread 1, HardFraction 0.01, HardAccuracy 0.6, Seed 7", cfg, err)
	}
	for _, sf := range []simFlags{
		{accuracy: 0.99, wrongSpread: -1},
		{accuracy: 0.99, hardSteps: "0.01"},
		{accuracy: 0.99, hardSteps: "2:0.5"},
	} {
		var ue usageError
		if _, err := sf.config(1); !errors.As(err, &ue) {
			t.Errorf("%+v: error %v, want a usage error", sf, err)
		}
	}
}

// TestSimFlagsCommandLine runs bad knob values through the real parser:
// each command refuses them with exit 2 before starting anything.
func TestSimFlagsCommandLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"simllm", "--hard-steps", "2:0.5"}, `hard steps "2:0.5": want FRACTION:ACCURACY`},
		{[]string{"simllm", "--hard-steps", "0.1"}, `hard steps "0.1": want FRACTION:ACCURACY`},
		{[]string{"simllm", "--wrong-spread", "-1"}, "negative WrongSpread -1"},
		{[]string{"simllm", "--wrong-spread", "two"}, `invalid argument "two" for "--wrong-spread"`},
		{[]string{"run", "--sim-hard-steps", "0.5:0"}, `hard steps "0.5:0": want FRACTION:ACCURACY`},
		{[]string{"run", "--sim-wrong-spread", "-3"}, "negative WrongSpread -3"},
		{[]string{"bench", "--sim-hard-steps", "0.5:1.5"}, `hard steps "0.5:1.5": want FRACTION:ACCURACY`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			res := runMain(t, tt.args...)
			if res.code != ExitUsage || !strings.Contains(res.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", res.code, res.stderr, ExitUsage, tt.want)
			}
		})
	}
}
