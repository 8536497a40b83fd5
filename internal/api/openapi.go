package api

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/schemas"
)

// The OpenAPI document is generated from the route table and the schemas
// types (BuildOpenAPI, with internal/schemagen's components); go generate
// writes it to openapi.json, which the binary embeds, and to
// docs/openapi.json, and a test fails when either is stale.
//go:generate go run ./internal/gen -out openapi.json -out ../../docs/openapi.json

//go:embed openapi.json
var openapiDoc []byte

// extraTypes are schemas the document names besides the routes' bodies:
// the problem, and what an event stream and a batch file carry.
var extraTypes = []reflect.Type{
	reflect.TypeFor[schemas.Problem](),
	reflect.TypeFor[schemas.JobStatus](),
	reflect.TypeFor[schemas.BatchOutputLine](),
}

// keyedErrors are the problem statuses every keyed route may answer.
var keyedErrors = []int{http.StatusUnauthorized, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable}

// OpenAPI returns the API's OpenAPI 3.1 document as generated and
// embedded: indented JSON, keys sorted, newline-terminated, byte for byte
// docs/openapi.json. The caller must not change it.
func OpenAPI() []byte { return openapiDoc }

// Components returns the components/schemas of an OpenAPI document for
// the given types of package schemas and the types they refer to, keyed by
// type name (internal/schemagen.OpenAPIComponents).
type Components func(types ...reflect.Type) (map[string]json.RawMessage, error)

// BuildOpenAPI builds the document from the route table, with comps
// making the bodies' schemas. The generator and the tests call it; the
// server serves the embedded result.
func BuildOpenAPI(comps Components) ([]byte, error) {
	return (*Server)(nil).document(comps)
}

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request, _ apikey.Principal) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(OpenAPI())
	return nil
}

var pathParamRE = regexp.MustCompile(`\{([a-z_]+)\}`)

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

// schemaOf is a body's schema: a reference to its type, or a string.
func schemaOf(c *content) map[string]any {
	if c.typ == nil {
		return map[string]any{"type": "string"}
	}
	return ref(c.typ.Name())
}

func mediaOf(c *content) map[string]any {
	out := map[string]any{}
	for _, t := range c.types {
		out[t] = map[string]any{"schema": schemaOf(c)}
	}
	return out
}

// document builds the OpenAPI document from s's routes (s may be nil: the
// table does not depend on the server's state).
func (s *Server) document(components Components) ([]byte, error) {
	types := slices.Clone(extraTypes)
	paths := map[string]map[string]any{}
	for _, rt := range s.routes() {
		op := map[string]any{"operationId": rt.id, "summary": rt.summary}
		if rt.desc != "" {
			op["description"] = rt.desc
		}
		var params []any
		for _, m := range pathParamRE.FindAllStringSubmatch(rt.path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range rt.query {
			params = append(params, map[string]any{"name": q.name, "in": "query", "description": q.desc, "schema": map[string]any{"type": q.typ}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rt.body != nil {
			body := map[string]any{"required": true, "content": mediaOf(rt.body)}
			if rt.body.desc != "" {
				body["description"] = rt.body.desc
			}
			op["requestBody"] = body
			if rt.body.typ != nil {
				types = append(types, rt.body.typ)
			}
		}
		ok := map[string]any{"description": http.StatusText(rt.ok)}
		if rt.okBody != nil {
			if rt.okBody.desc != "" {
				ok["description"] = rt.okBody.desc
			}
			ok["content"] = mediaOf(rt.okBody)
			if rt.okBody.typ != nil {
				types = append(types, rt.okBody.typ)
			}
		}
		responses := map[string]any{strconv.Itoa(rt.ok): ok}
		if rt.also != 0 {
			responses[strconv.Itoa(rt.also)] = ok
		}
		// Any route answers 400 to a query string that does not parse (and
		// one taking ?tenant= to a malformed tenant).
		errs := append(slices.Clone(rt.errs), http.StatusBadRequest)
		if rt.access != public {
			errs = append(errs, keyedErrors...)
		} else {
			op["security"] = []any{}
		}
		if rt.access == admin {
			errs = append(errs, http.StatusForbidden)
		}
		for _, code := range errs {
			responses[strconv.Itoa(code)] = map[string]any{
				"description": problemDescription(code),
				"content":     map[string]any{problemContentType: map[string]any{"schema": ref("Problem")}},
			}
		}
		op["responses"] = responses
		if paths[rt.path] == nil {
			paths[rt.path] = map[string]any{}
		}
		method := strings.ToLower(rt.method)
		if _, dup := paths[rt.path][method]; dup {
			return nil, fmt.Errorf("api: route %s %s twice", rt.method, rt.path)
		}
		paths[rt.path][method] = op
	}
	comps, err := components(types...)
	if err != nil {
		return nil, err
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":   "makerfleet API",
			"version": "v1",
			"description": "The HTTP/JSON API of maker serve: jobs, batches, tasks, usage and quotas of a makerfleet " +
				"fleet. Every request but /healthz and /openapi.json carries an API key (Authorization: Bearer KEY, " +
				"made by maker keys create) and acts for its tenant: another tenant's ids answer 404. Errors are " +
				"RFC 9457 problem details (application/problem+json); their types are " + ProblemBase + "<type>.",
		},
		"security": []any{map[string]any{"bearer": []any{}}},
		"paths":    paths,
		"components": map[string]any{
			"schemas": comps,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{
					"type": "http", "scheme": "bearer",
					"description": "An API key, mk_<key id>_<secret>, from maker keys create.",
				},
			},
		},
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// problemDescription says what a problem status means on this API.
func problemDescription(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "bad-request: the body is not JSON, or a query parameter is malformed"
	case http.StatusUnauthorized:
		return "unauthorized: no API key, or an unknown or revoked one"
	case http.StatusForbidden:
		return "forbidden: the route needs an admin key"
	case http.StatusNotFound:
		return "not-found: no such id for this key's tenant (another tenant's ids are not found either)"
	case http.StatusConflict:
		return "conflict, not-finished, finished or not-waiting: the request does not fit the resource's state"
	case http.StatusRequestEntityTooLarge:
		return "too-large: the body is over the server's limit"
	case http.StatusUnsupportedMediaType:
		return "unsupported-media-type: the Content-Type is not accepted here"
	case http.StatusUnprocessableEntity:
		return "invalid-request or over-budget: errors[] names each failing field by its JSON pointer (e.g. /params/disks)"
	case http.StatusTooManyRequests:
		return "rate-limited: the key's request rate limit is reached; Retry-After says when to come back"
	case http.StatusNotImplemented:
		return "not-implemented: this server does not offer the route"
	case http.StatusServiceUnavailable:
		return "unavailable: the fleet did not answer; try again"
	}
	return "internal: the server failed"
}
