package schemagen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/makerfleet/makerfleet/schemas"
)

// Schemas returns the JSON Schema (draft 2020-12) of every kind in schemas.All,
// keyed by kind: indented, keys sorted, newline-terminated, byte for byte
// the files in jsonschema/. Descriptions are the Go doc comments.
//
// A schema describes a message as Encode writes it and checks every rule
// that concerns one field, plus the outcome and state conditionals; rules
// that tie numbers together (sample_id, lead <= votes, max_samples_per_step
// >= k) are Validate's alone.
func Schemas() (map[string][]byte, error) {
	out := make(map[string][]byte)
	for _, mt := range schemas.All() {
		b, err := messageSchema(mt)
		if err != nil {
			return nil, fmt.Errorf("schemas: %s schema: %w", mt.Kind, err)
		}
		out[mt.Kind] = b
	}
	ts, err := TaskSpecSchema()
	if err != nil {
		return nil, fmt.Errorf("schemas: task_spec schema: %w", err)
	}
	out[schemas.KindTaskSpec] = ts
	return out, nil
}

// TaskSpecSchema returns the JSON Schema of a task spec file, byte for
// byte jsonschema/task_spec.schema.json.
func TaskSpecSchema() ([]byte, error) {
	t := reflect.TypeFor[schemas.TaskSpec]()
	r := &jsonschema.Reflector{ExpandedStruct: true, Anonymous: true, LookupComment: lookupDoc}
	s := r.ReflectFromType(t)
	s.ID = jsonschema.ID(schemas.SchemaID(schemas.KindTaskSpec))
	s.Title = t.Name()
	if err := shape(s, t, s.Definitions, make(map[reflect.Type]bool)); err != nil {
		return nil, err
	}
	return canonical(s)
}

func messageSchema(mt schemas.MessageType) ([]byte, error) {
	t := reflect.TypeOf(mt.New()).Elem()
	r := &jsonschema.Reflector{ExpandedStruct: true, Anonymous: true, LookupComment: lookupDoc}
	s := r.ReflectFromType(t)
	s.ID = jsonschema.ID(schemas.SchemaID(mt.Kind))
	s.Title = t.Name()
	if err := shape(s, t, s.Definitions, make(map[reflect.Type]bool)); err != nil {
		return nil, err
	}
	v := s.Properties.Value("version")
	v.Const, v.Minimum = schemas.Version, ""
	s.Properties.Value("kind").Const = mt.Kind
	if c := conditions[mt.Kind]; c != nil {
		s.AllOf = c()
	}
	return canonical(s)
}

var (
	schemasPkg     = reflect.TypeFor[schemas.Header]().PkgPath()
	deltaType      = reflect.TypeFor[schemas.Delta]()
	rawMessageType = reflect.TypeFor[json.RawMessage]()
)

// lookupDoc serves doc comments from docs_gen.go to the reflector.
func lookupDoc(t reflect.Type, field string) string {
	if t.PkgPath() != schemasPkg {
		return ""
	}
	if field == "" {
		return docComments[t.Name()]
	}
	return docComments[t.Name()+"."+field]
}

// shape adds to struct schema s, of Go type t, what reflection cannot know,
// then does the same for the struct types t refers to (in defs).
func shape(s *jsonschema.Schema, t reflect.Type, defs jsonschema.Definitions, done map[reflect.Type]bool) error {
	done[t] = true
	if t == deltaType {
		s.Required = nil // a Delta leaves its zero fields out: none is required
	}
	for f := range t.Fields() {
		tag, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && tag == "" {
			if err := shape(s, f.Type, defs, done); err != nil {
				return err
			}
			continue
		}
		p, ok := s.Properties.Get(tag)
		if !ok {
			return fmt.Errorf("%s.%s: no property %q", t.Name(), f.Name, tag)
		}
		if tag != "seed" { // seeds are the only numbers that may be negative
			minZero(p)
			minZero(p.Items)
			minZero(p.AdditionalProperties)
		}
		if rule := identifierRules[tag]; rule != nil {
			rule(p)
		}
		if rule := fieldRules[t.Name()+"."+tag]; rule != nil {
			rule(p)
		}
		ft := f.Type
		// encoding/json writes a nil slice or map as null unless omitempty
		// drops it, and producers do send nil (an empty tally).
		if k := ft.Kind(); (k == reflect.Slice || k == reflect.Map) && ft != rawMessageType && !strings.Contains(opts, "omitempty") {
			desc := p.Description
			p.Description = ""
			s.Properties.Set(tag, &jsonschema.Schema{
				Description: desc,
				AnyOf:       []*jsonschema.Schema{p, {Type: "null"}},
			})
		}
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && !done[ft] {
			if def := defs[ft.Name()]; def != nil {
				if err := shape(def, ft, defs, done); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func minZero(p *jsonschema.Schema) {
	if p != nil && (p.Type == "integer" || p.Type == "number") {
		p.Minimum = "0"
	}
}

func num(v float64) json.Number { return json.Number(strconv.FormatFloat(v, 'f', -1, 64)) }

func between(lo, hi float64) func(*jsonschema.Schema) {
	return func(p *jsonschema.Schema) { p.Minimum, p.Maximum = num(lo), num(hi) }
}

func atLeast(lo float64) func(*jsonschema.Schema) {
	return func(p *jsonschema.Schema) { p.Minimum = num(lo) }
}

func pattern(re string) func(*jsonschema.Schema) {
	return func(p *jsonschema.Schema) { p.Pattern = re }
}

func minLength(n uint64) func(*jsonschema.Schema) {
	return func(p *jsonschema.Schema) { p.MinLength = &n }
}

// maxLength bounds a string's characters: never stricter than a bound on
// its bytes.
func maxLength(n uint64) func(*jsonschema.Schema) {
	return func(p *jsonschema.Schema) { p.MaxLength = &n }
}

func items(lo, hi uint64) func(*jsonschema.Schema) {
	return func(p *jsonschema.Schema) { p.MinItems, p.MaxItems = &lo, &hi }
}

// arbitrationID is the shape of ArbitrationRequestID.
var arbitrationID = pattern("^" + schemas.ArbitrationIDPrefix + "[0-9a-f]{32}$")

// bare strips the anchors of a regexp so it can be part of another.
func bare(re string) string { return strings.TrimSuffix(strings.TrimPrefix(re, "^"), "$") }

const countRE = `(0|[1-9][0-9]*)`

// identifierRules apply to the property of that name in every message.
var identifierRules = map[string]func(*jsonschema.Schema){
	"tenant": pattern(schemas.TenantPattern),
	"job_id": pattern(schemas.JobIDPattern),
	"task":   pattern(schemas.TaskPattern),
	// Break-glass requests are named like jobs.
	"request_id":        pattern(schemas.JobIDPattern),
	"session":           pattern(schemas.JobIDPattern),
	"parent_request_id": pattern(schemas.JobIDPattern),
	"sample_id": pattern("^" + bare(schemas.TenantPattern) + "/" + bare(schemas.JobIDPattern) +
		strings.Repeat("/"+countRE, 4) + "$"),
}

// fieldRules mirror the one-field rules of Validate, keyed "Type.property".
// Every number but a seed is already >= 0.
var fieldRules = map[string]func(*jsonschema.Schema){
	"JobSpec.params":               func(p *jsonschema.Schema) { p.Type = "object" },
	"TaskSpec.name":                pattern(schemas.TaskPattern),
	"SampleResult.red_flag":        pattern(schemas.RedFlagNamePattern),
	"SampleRequest.token":          pattern(schemas.SampleTokenPattern),
	"SampleResult.token":           pattern(schemas.SampleTokenPattern),
	"JobSpec.task_version":         pattern(schemas.TaskSpecVersionPattern),
	"JobSpec.task_hash":            pattern(schemas.TaskHashPattern),
	"SampleRequest.task_version":   pattern(schemas.TaskSpecVersionPattern),
	"SampleRequest.task_hash":      pattern(schemas.TaskHashPattern),
	"JobReport.task_version":       pattern(schemas.TaskSpecVersionPattern),
	"JobReport.task_hash":          pattern(schemas.TaskHashPattern),
	"TaskSpec.version":             pattern(schemas.TaskSpecVersionPattern),
	"TaskLet.name":                 pattern(schemas.TaskLetNamePattern),
	"TaskSpec.params":              func(p *jsonschema.Schema) { p.Type = "object" },
	"TaskSpec.initial":             minLength(1),
	"TaskSpec.max_steps":           minLength(1),
	"TaskSpec.done":                minLength(1),
	"TaskPrompt.user":              minLength(1),
	"TaskAnswer.schema":            func(p *jsonschema.Schema) { p.Type = "object" },
	"TaskCheck.name":               pattern(schemas.RedFlagNamePattern),
	"TaskCheck.when":               minLength(1),
	"JobSpec.k":                    between(1, schemas.MaxK),
	"JobSpec.max_samples_per_step": between(1, schemas.MaxSamplesLimit),
	"JobSpec.max_output_tokens":    between(1, schemas.MaxOutputTokensLimit),
	"JobSpec.temperature_first":    between(0, schemas.MaxTemperature),
	"JobSpec.temperature_rest":     between(0, schemas.MaxTemperature),
	"JobSpec.sample_timeout_ms":    atLeast(schemas.MinSampleTimeoutMS),
	"JobSpec.p_estimate": func(p *jsonschema.Schema) {
		p.Minimum, p.ExclusiveMinimum, p.ExclusiveMaximum = "", "0.5", "1"
	},
	"JobSpec.valid_fraction": func(p *jsonschema.Schema) {
		p.Minimum, p.ExclusiveMinimum, p.Maximum = "", "0", "1"
	},
	"Pricing.input_usd_per_mtok":      between(0, schemas.MaxPriceUSDPerMTok),
	"Pricing.output_usd_per_mtok":     between(0, schemas.MaxPriceUSDPerMTok),
	"SampleRequest.temperature":       between(0, schemas.MaxTemperature),
	"SampleRequest.max_output_tokens": atLeast(1),
	"StepDecided.vote_key":            minLength(1),
	"StepDecided.votes":               atLeast(1),
	"StepDecided.lead":                atLeast(1),
	"StepDecided.samples":             atLeast(1),
	"JobReport.k":                     between(1, schemas.MaxK),
	"JobReport.p_estimate":            between(0, 1),
	"BreakGlassRequest.problem":       minLength(1),
	"BreakGlassRequest.budget_usd":    between(0, schemas.MaxBreakGlassBudgetUSD),
	"Solution.confidence":             between(0, 1),
	"BreakGlassAudit.confidence":      between(0, 1),
	"ArbiterDecision.confidence":      between(0, 1),
	"ArbiterDecision.threshold":       between(0, 1),
	"FusionPlugin.id":                 func(p *jsonschema.Schema) { p.Const = "fusion" },
	"ArbitrationRequest.request_id":   arbitrationID,
	"ArbitrationRequest.k":            between(1, schemas.MaxK),
	"ArbitrationRequest.state":        maxLength(schemas.MaxArbitrationStateBytes),
	"ArbitrationRequest.candidates":   items(1, schemas.MaxArbitrationCandidates),
	"ArbitrationRequest.min_confidence": func(p *jsonschema.Schema) {
		p.Minimum, p.ExclusiveMinimum, p.Maximum = "", "0", num(1)
	},
	"ArbitrationResponse.request_id": arbitrationID,
	"ContextFile.path":               minLength(1),
}

// conditions return a kind's allOf: the rules that hang on another field.
var conditions = map[string]func() []*jsonschema.Schema{
	schemas.KindSampleResult: func() []*jsonschema.Schema {
		return []*jsonschema.Schema{
			when("outcome", constant(schemas.OutcomeVote),
				object([]string{"vote_key"}, "vote_key", minLen1(), "red_flag", constant(""))),
			when("outcome", constant(schemas.OutcomeRedFlag),
				object([]string{"red_flag"}, "red_flag", minLen1(), "vote_key", constant(""))),
			when("outcome", &jsonschema.Schema{Enum: []any{schemas.OutcomeSkipped, schemas.OutcomeCancelled}},
				object(nil, "vote_key", constant(""), "red_flag", constant(""))),
		}
	},
	schemas.KindArbitrationResponse: func() []*jsonschema.Schema {
		held := when("outcome", constant(schemas.BreakGlassHeld), object([]string{"reason"}, "reason", minLen1()))
		held.Else = object([]string{"decision"})
		return []*jsonschema.Schema{held}
	},
	schemas.KindArbiterDecision: func() []*jsonschema.Schema {
		return []*jsonschema.Schema{
			when("outcome", constant(schemas.ArbiterDecided), object([]string{"vote_key"}, "vote_key", minLen1())),
			when("outcome", constant(schemas.ArbiterNeedsHuman), object(nil, "vote_key", constant(""))),
		}
	},
	schemas.KindJobReport: func() []*jsonschema.Schema {
		solved := when("state", constant(schemas.StateSolved), object(nil, "solved", constant(true)))
		solved.Else = object(nil, "solved", constant(false))
		return []*jsonschema.Schema{
			solved,
			when("state", constant(schemas.StateNoConsensus), object([]string{"no_consensus"})),
		}
	},
}

// when returns "if property matches cond then then".
func when(property string, cond, then *jsonschema.Schema) *jsonschema.Schema {
	return &jsonschema.Schema{If: object(nil, property, cond), Then: then}
}

func constant(v any) *jsonschema.Schema { return &jsonschema.Schema{Const: v} }

func minLen1() *jsonschema.Schema {
	s := &jsonschema.Schema{}
	minLength(1)(s)
	return s
}

// object returns a schema with required and the properties given as name,
// schema pairs.
func object(required []string, kv ...any) *jsonschema.Schema {
	s := &jsonschema.Schema{Required: required}
	if len(kv) > 0 {
		s.Properties = jsonschema.NewProperties()
	}
	for i := 0; i < len(kv); i += 2 {
		s.Properties.Set(kv[i].(string), kv[i+1].(*jsonschema.Schema))
	}
	return s
}

// canonical renders s with every object's keys sorted (by way of a map),
// indented, without HTML escaping, newline-terminated.
func canonical(s *jsonschema.Schema) ([]byte, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep numbers as written
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// OpenAPIComponents returns the JSON Schemas (draft 2020-12, as OpenAPI 3.1
// takes them) of the given types, each a struct of this package, and of
// every struct type they refer to, keyed by type name: the
// components/schemas of an OpenAPI document, referring to each other as
// "#/components/schemas/<name>". They carry the same doc comments and
// one-field rules as the message schemas in jsonschema/; a message kind's
// also has its version and kind constants and its conditions. A
// schemas.JobRequest's fields take a JobSpec's rules.
func OpenAPIComponents(types ...reflect.Type) (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage)
	kinds := make(map[reflect.Type]string)
	for _, mt := range schemas.All() {
		kinds[reflect.TypeOf(mt.New()).Elem()] = mt.Kind
	}
	for _, t := range types {
		if t.Kind() != reflect.Struct || t.PkgPath() != schemasPkg {
			return nil, fmt.Errorf("schemas: %v is not a struct of package schemas", t)
		}
		r := &jsonschema.Reflector{ExpandedStruct: true, Anonymous: true, LookupComment: lookupDoc}
		s := r.ReflectFromType(t)
		if err := shape(s, t, s.Definitions, make(map[reflect.Type]bool)); err != nil {
			return nil, fmt.Errorf("schemas: %s schema: %w", t.Name(), err)
		}
		if t == reflect.TypeFor[schemas.JobRequest]() {
			for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
				if rule := fieldRules["JobSpec."+pair.Key]; rule != nil {
					rule(pair.Value)
				}
			}
		}
		if kind, ok := kinds[t]; ok {
			v := s.Properties.Value("version")
			v.Const, v.Minimum = schemas.Version, ""
			s.Properties.Value("kind").Const = kind
			if c := conditions[kind]; c != nil {
				s.AllOf = c()
			}
		}
		defs := s.Definitions
		s.Definitions, s.Version, s.ID = nil, "", ""
		s.Title = t.Name()
		all := map[string]*jsonschema.Schema{t.Name(): s}
		for name, d := range defs {
			all[name] = d
		}
		nullable(all, t, make(map[reflect.Type]bool))
		for name, d := range all {
			if _, done := out[name]; done {
				continue
			}
			b, err := canonical(d)
			if err != nil {
				return nil, fmt.Errorf("schemas: %s schema: %w", name, err)
			}
			out[name] = bytes.ReplaceAll(b, []byte(`"#/$defs/`), []byte(`"#/components/schemas/`))
		}
	}
	for name, b := range out {
		if strings.Contains(string(b), `"#/$defs/`) {
			return nil, fmt.Errorf("schemas: %s schema keeps a $defs reference", name)
		}
	}
	return out, nil
}

// nullable lets a pointer field that encoding/json writes as null (no
// omitempty) be null in its struct's schema (in all, by type name), for t
// and the struct types it refers to.
func nullable(all map[string]*jsonschema.Schema, t reflect.Type, done map[reflect.Type]bool) {
	done[t] = true
	s := all[t.Name()]
	for f := range t.Fields() {
		if f.Anonymous {
			continue
		}
		tag, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		ft := f.Type
		if s != nil && ft.Kind() == reflect.Pointer && !strings.Contains(opts, "omitempty") {
			if p, ok := s.Properties.Get(tag); ok && p.Ref != "" {
				desc := p.Description
				p.Description = ""
				s.Properties.Set(tag, &jsonschema.Schema{Description: desc, AnyOf: []*jsonschema.Schema{p, {Type: "null"}}})
			}
		}
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == schemasPkg && !done[ft] {
			nullable(all, ft, done)
		}
	}
}
