package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/schemagen"
	"github.com/makerfleet/makerfleet/schemas"
)

const openapiFile = "../../docs/openapi.json"

// TestOpenAPIUpToDate: the embedded document and docs/openapi.json are
// the document the code generates (go generate ./internal/api/ writes
// both).
func TestOpenAPIUpToDate(t *testing.T) {
	t.Parallel()
	want, err := api.BuildOpenAPI(schemagen.OpenAPIComponents)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(openapiFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run go generate ./internal/api/", openapiFile)
	}
	if !bytes.Equal(api.OpenAPI(), want) {
		t.Error("the embedded openapi.json is stale: run go generate ./internal/api/")
	}
	again, _ := api.BuildOpenAPI(schemagen.OpenAPIComponents)
	if !bytes.Equal(again, want) {
		t.Error("BuildOpenAPI is not deterministic")
	}
}

type openapiDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]json.RawMessage `json:"schemas"`
	} `json:"components"`
}

type operation struct {
	OperationID string                     `json:"operationId"`
	Summary     string                     `json:"summary"`
	Security    *[]any                     `json:"security"`
	Responses   map[string]json.RawMessage `json:"responses"`
}

func readDoc(t *testing.T) openapiDoc {
	t.Helper()
	b := api.OpenAPI()
	var d openapiDoc
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOpenAPIRoutes: every route the server answers is documented and every
// documented operation is routed (an unauthenticated request gets the
// route's 401, or a public route's answer, never the not-found or
// method-not-allowed fallback); each operation has an id, a summary, a
// success and, when keyed, a 401; every $ref resolves.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	d := readDoc(t)
	if d.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q", d.OpenAPI)
	}
	srv := newBareServer(t)
	ids := map[string]bool{}
	for path, ops := range d.Paths {
		for method, raw := range ops {
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			if op.OperationID == "" || ids[op.OperationID] || op.Summary == "" {
				t.Errorf("%s %s: operationId %q (unique?) summary %q", method, path, op.OperationID, op.Summary)
			}
			ids[op.OperationID] = true
			public := op.Security != nil && len(*op.Security) == 0
			ok := false
			for code := range op.Responses {
				ok = ok || strings.HasPrefix(code, "2")
			}
			if !ok {
				t.Errorf("%s %s: no success response", method, path)
			}
			if _, has401 := op.Responses["401"]; !public && !has401 {
				t.Errorf("%s %s: a keyed route without its 401", method, path)
			}
			concrete := strings.NewReplacer("{id}", "j1", "{name}", "hanoi", "{tenant}", "alpha").Replace(path)
			req := httptest.NewRequest(strings.ToUpper(method), concrete, nil)
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			want := http.StatusUnauthorized
			if public {
				want = http.StatusOK
			}
			if rec.Code != want {
				t.Errorf("%s %s: %d, want %d (is it routed?)", method, concrete, rec.Code, want)
			}
		}
	}
	if len(ids) < 25 {
		t.Errorf("only %d operations documented", len(ids))
	}
	// An undocumented method and path fall back to problems.
	for _, c := range []struct {
		method, path string
		code         int
	}{{"PATCH", "/v1/jobs", 405}, {"GET", "/v1/nothing", 404}, {"GET", "/", 404}} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.code || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %d %s", c.method, c.path, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
	b := api.OpenAPI()
	for _, m := range refRE.FindAllStringSubmatch(string(b), -1) {
		if _, ok := d.Components.Schemas[m[1]]; !ok {
			t.Errorf("$ref to %s, which is not a component", m[1])
		}
	}
}

// TestOpenAPISchemas: every component compiles as JSON Schema 2020-12,
// and examples of the API's bodies validate against theirs.
func TestOpenAPISchemas(t *testing.T) {
	t.Parallel()
	d := readDoc(t)
	for name := range d.Components.Schemas {
		component(t, name)
	}
	valid := map[string]any{
		"JobRequest": schemas.JobRequest{Task: "hanoi", Params: json.RawMessage(`{"disks":3}`), K: 3, BudgetUSD: 1,
			Pricing: &schemas.Pricing{InputUSDPerMTok: 1, OutputUSDPerMTok: 2}},
		"Problem": schemas.Problem{Type: api.ProblemBase + api.TypeInvalid, Title: "Invalid request", Status: 422,
			Errors: []schemas.FieldError{{Path: "/params/disks", Message: "too many"}}},
		"TenantQuota": schemas.TenantQuota{Header: schemas.NewHeader(schemas.KindTenantQuota), Tenant: "alpha", MaxRunningJobs: 2},
	}
	for name, v := range valid {
		b, _ := json.Marshal(v)
		checkBody(t, name, b)
	}
	for name, body := range map[string]string{
		"JobRequest": `{"task":"hanoi","params":{"disks":3},"k":0}`,
		"Problem":    `{"type":"x","title":"y"}`,
	} {
		if err := validate(t, name, []byte(body)); err == nil {
			t.Errorf("%s %s validates", name, body)
		}
	}
}

var refRE = regexp.MustCompile(`"#/components/schemas/([A-Za-z0-9]+)"`)

var (
	compileOnce sync.Once
	compiler    *jsonschema.Compiler
	compiled    sync.Map // name → *jsonschema.Schema
	compileMu   sync.Mutex
)

const docURL = "https://makerfleet.dev/openapi.json"

// component returns the compiled schema of component name.
func component(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	compileOnce.Do(func() {
		b := api.OpenAPI()
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			panic(err)
		}
		compiler = jsonschema.NewCompiler()
		compiler.DefaultDraft(jsonschema.Draft2020)
		if err := compiler.AddResource(docURL, v); err != nil {
			panic(err)
		}
	})
	if s, ok := compiled.Load(name); ok {
		return s.(*jsonschema.Schema)
	}
	compileMu.Lock()
	defer compileMu.Unlock()
	s, err := compiler.Compile(docURL + "#/components/schemas/" + name)
	if err != nil {
		t.Fatalf("component %s: %v", name, err)
	}
	compiled.Store(name, s)
	return s
}

func validate(t *testing.T, name string, body []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return component(t, name).Validate(v)
}

// checkBody fails the test unless body validates against component name:
// the server answers what its document says.
func checkBody(t *testing.T, name string, body []byte) {
	t.Helper()
	if err := validate(t, name, body); err != nil {
		t.Errorf("%s does not validate against %s: %v", body, name, err)
	}
}
