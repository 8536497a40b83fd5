package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// ProblemBase starts every problem type URI; docs/api.md lists them.
const ProblemBase = "https://makerfleet.dev/problems/"

// Problem types: the last part of a problem's type URI.
const (
	TypeBadRequest       = "bad-request"
	TypeUnauthorized     = "unauthorized"
	TypeForbidden        = "forbidden"
	TypeNotFound         = "not-found"
	TypeMethodNotAllowed = "method-not-allowed"
	TypeConflict         = "conflict"
	TypeNotFinished      = "not-finished"
	TypeFinished         = "finished"
	TypeNotWaiting       = "not-waiting"
	TypeTooLarge         = "too-large"
	TypeUnsupportedMedia = "unsupported-media-type"
	TypeInvalid          = "invalid-request"
	TypeOverBudget       = "over-budget"
	TypeUnpriced         = "unpriced"
	TypeRateLimited      = "rate-limited"
	TypeInternal         = "internal"
	TypeNotImplemented   = "not-implemented"
	TypeUnavailable      = "unavailable"

	problemContentType = "application/problem+json"
)

// titles are the problem types' titles, with their status.
var titles = map[string]struct {
	status int
	title  string
}{
	TypeBadRequest:       {http.StatusBadRequest, "Bad request"},
	TypeUnauthorized:     {http.StatusUnauthorized, "Unauthorized"},
	TypeForbidden:        {http.StatusForbidden, "Forbidden"},
	TypeNotFound:         {http.StatusNotFound, "Not found"},
	TypeMethodNotAllowed: {http.StatusMethodNotAllowed, "Method not allowed"},
	TypeConflict:         {http.StatusConflict, "Conflict"},
	TypeNotFinished:      {http.StatusConflict, "Job not finished"},
	TypeFinished:         {http.StatusConflict, "Job finished"},
	TypeNotWaiting:       {http.StatusConflict, "Step not waiting for a person"},
	TypeTooLarge:         {http.StatusRequestEntityTooLarge, "Request body too large"},
	TypeUnsupportedMedia: {http.StatusUnsupportedMediaType, "Unsupported media type"},
	TypeInvalid:          {http.StatusUnprocessableEntity, "Invalid request"},
	TypeOverBudget:       {http.StatusUnprocessableEntity, "Budget below the forecast"},
	TypeUnpriced:         {http.StatusUnprocessableEntity, "Work the fleet does not price"},
	TypeRateLimited:      {http.StatusTooManyRequests, "Too many requests"},
	TypeInternal:         {http.StatusInternalServerError, "Internal error"},
	TypeNotImplemented:   {http.StatusNotImplemented, "Not implemented"},
	TypeUnavailable:      {http.StatusServiceUnavailable, "Fleet unavailable"},
}

// problemError is an error that is answered as a problem.
type problemError struct {
	p schemas.Problem
	// retryAfter, when set, is sent as the Retry-After header (seconds).
	retryAfter int
	// allow, when set, is sent as the Allow header (405).
	allow string
}

func (e *problemError) Error() string { return e.p.Title + ": " + e.p.Detail }

// problem returns the problem of type typ with detail.
func problem(typ, format string, args ...any) *problemError {
	t := titles[typ]
	return &problemError{p: schemas.Problem{
		Type: ProblemBase + typ, Title: t.title, Status: t.status, Detail: fmt.Sprintf(format, args...),
	}}
}

// invalidField is a 422 naming the failing field by its JSON pointer.
func invalidField(path, format string, args ...any) *problemError {
	msg := fmt.Sprintf(format, args...)
	p := problem(TypeInvalid, "%s", msg)
	p.p.Errors = []schemas.FieldError{{Path: path, Message: msg}}
	return p
}

// writeProblem answers err: a problemError as itself, anything else as the
// problem its sentinel names (500 when none does).
func writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	pe := asProblem(err)
	pe.p.Instance = r.URL.Path
	h := w.Header()
	h.Set("Content-Type", problemContentType)
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	if pe.retryAfter > 0 {
		h.Set("Retry-After", fmt.Sprint(pe.retryAfter))
	}
	if pe.allow != "" {
		h.Set("Allow", pe.allow)
	}
	if pe.p.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="makerfleet"`)
	}
	w.WriteHeader(pe.p.Status)
	_ = json.NewEncoder(w).Encode(pe.p)
}

// asProblem maps err to its problem.
func asProblem(err error) *problemError {
	var pe *problemError
	if errors.As(err, &pe) {
		return pe
	}
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return problem(TypeNotFound, "no such job")
	case errors.Is(err, jobs.ErrFinished):
		return problem(TypeFinished, "%s", detailOf(err))
	case errors.Is(err, jobs.ErrNotWaiting):
		return problem(TypeNotWaiting, "%s", detailOf(err))
	case errors.Is(err, jobs.ErrConflict):
		return problem(TypeConflict, "%s", detailOf(err))
	case errors.Is(err, errJournalDenied):
		return problem(TypeUnavailable, "this server may not read the jobs' journal on NATS: an operator must grant "+
			"its identity the journal reads (maker auth init writes them); the server's log names what was refused")
	case errors.Is(err, jobs.ErrUnavailable):
		return problem(TypeUnavailable, "the fleet did not answer; try again")
	case errors.Is(err, jobs.ErrInvalid):
		return specProblem(err)
	}
	return problem(TypeInternal, "the server failed to answer this request")
}

// detailOf is err's message without the prefixes of the sentinels and
// message kinds it wraps: what a person needs of it.
func detailOf(err error) string {
	return prefixes.Replace(err.Error())
}

var prefixes = strings.NewReplacer(
	jobs.ErrInvalid.Error()+": ", "", schemas.ErrInvalid.Error()+": ", "",
	task.ErrInvalidParams.Error()+": ", "params: ", task.ErrUnknownTask.Error(), "unknown task",
	schemas.KindJobSpec+": ", "", schemas.KindDecideRequest+": ", "", schemas.KindTenantQuota+": ", "", schemas.KindModelPrice+": ", "",
	pricing.ErrUnpriced.Error()+": ", "",
	"jobs: ", "", "taskreg: ", "",
)

// validationRE reads a schemas validation message: "<kind>: <field> ...".
var validationRE = regexp.MustCompile(`^schemas: invalid message: [a-z_]+: ([a-z_][a-z0-9_.]*)[ ,]`)

// paramRE reads a task's params message naming a param: "<name> must ...".
var paramRE = regexp.MustCompile(`^([a-z_][a-z0-9_]*) (must|is|has)\b`)

// specProblem is the 422 of a job spec that did not prepare (jobs.ErrInvalid
// or one of its causes), naming the failing field: a spec field
// ("/k", "/pricing/input_usd_per_mtok"), a task param ("/params/disks",
// or "/params" when the task does not say which), or "/task".
func specProblem(err error) *problemError {
	msg := detailOf(err)
	path := ""
	switch {
	case errors.Is(err, pricing.ErrOverBudget):
		pe := problem(TypeOverBudget, "%s", strings.TrimPrefix(innermost(err, pricing.ErrOverBudget), pricing.ErrOverBudget.Error()+": "))
		pe.p.Errors = []schemas.FieldError{{Path: "/budget_usd", Message: pe.p.Detail}}
		return pe
	case errors.Is(err, task.ErrUnknownTask), errors.Is(err, taskreg.ErrNotFound):
		path = "/task"
	case errors.Is(err, task.ErrInvalidParams):
		return paramsProblem(err, msg)
	case errors.Is(err, jobs.ErrNoK):
		path = "/k"
	case errors.Is(err, schemas.ErrInvalid):
		path = fieldPath(err)
	}
	return invalidField(path, "%s", msg)
}

// fieldPath is the JSON pointer of the field a schemas validation error
// names ("" when it names none).
func fieldPath(err error) string {
	s := innermost(err, schemas.ErrInvalid)
	if strings.Contains(s, "job id ") {
		return "/job_id"
	}
	m := validationRE.FindStringSubmatch(s + " ")
	if m == nil {
		return ""
	}
	return "/" + strings.ReplaceAll(m[1], ".", "/")
}

// innermost returns the message of the deepest error in err's chain that
// still wraps target (the validation message itself, without the wrappers'
// prefixes).
func innermost(err, target error) string {
	s := err.Error()
	for e := err; e != nil && e != target; {
		if errors.Is(e, target) {
			s = e.Error()
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			var next error
			for _, c := range u.Unwrap() {
				if errors.Is(c, target) && c != target {
					next = c
				}
			}
			e = next
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		default:
			e = nil
		}
	}
	return s
}

// paramsPath is the params' failing path: a spec task's schema names it
// ("<task> params: /a: ..."), a built-in's message starts with the param,
// or holds encoding/json's decode error naming it (a wrong type, an
// unknown field).
func paramsPath(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return "/params/" + strings.ReplaceAll(te.Field, ".", "/")
	}
	msg := innermost(err, task.ErrInvalidParams)
	msg = strings.TrimPrefix(msg, task.ErrInvalidParams.Error()+": ")
	if i := strings.Index(msg, " params: /"); i >= 0 {
		return "/params"
	}
	if m := paramRE.FindStringSubmatch(msg); m != nil {
		return "/params/" + m[1]
	}
	// A built-in's decode error, kept as text ("...: %v").
	if m := jsonTypeRE.FindStringSubmatch(msg); m != nil {
		return "/params/" + strings.ReplaceAll(m[1], ".", "/")
	}
	if m := jsonUnknownRE.FindStringSubmatch(msg); m != nil {
		return "/params/" + m[1]
	}
	return "/params"
}

// jsonTypeRE and jsonUnknownRE read encoding/json's decode errors: a
// value of the wrong type ("json: cannot unmarshal string into Go struct
// field Params.disks of type int": the field's path of JSON names after
// the struct's name) and a field the params do not have
// (DisallowUnknownFields: "json: unknown field \"bogus\"").
var (
	jsonTypeRE    = regexp.MustCompile(`json: cannot unmarshal \S+ into Go struct field [^.\s]+\.(\S+) of type`)
	jsonUnknownRE = regexp.MustCompile(`json: unknown field "([^"]+)"`)
)

// paramsProblem is the 422 of invalid params, with one error per failing
// path a spec task's schema names ("<task> params: /a: msg; /b: msg").
func paramsProblem(err error, msg string) *problemError {
	inner := strings.TrimPrefix(innermost(err, task.ErrInvalidParams), task.ErrInvalidParams.Error()+": ")
	p := problem(TypeInvalid, "%s", msg)
	if i := strings.Index(inner, " params: /"); i >= 0 {
		for _, part := range strings.Split(inner[i+len(" params: "):], "; ") {
			at, m, ok := strings.Cut(part, ": ")
			if !ok || !strings.HasPrefix(at, "/") {
				continue
			}
			if at == "/" {
				at = ""
			}
			p.p.Errors = append(p.p.Errors, schemas.FieldError{Path: "/params" + at, Message: m})
		}
	}
	if len(p.p.Errors) == 0 {
		p.p.Errors = []schemas.FieldError{{Path: paramsPath(err), Message: inner}}
	}
	return p
}
