package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 1 << 20

// Options configure a Client. Zero fields take the defaults.
type Options struct {
	// HTTPClient sends the requests. Default: a client of its own with no
	// overall timeout (event streams and batch outputs last; bound calls
	// with their context).
	HTTPClient *http.Client
	// UserAgent is sent with every request. Default "makerfleet-httpapi".
	UserAgent string
}

// Client calls one API server with one key. It is safe for concurrent use.
type Client struct {
	base string // scheme://host[/path], no trailing slash
	key  string
	hc   *http.Client
	ua   string
	// tenant, when set (ForTenant), is sent as ?tenant= on the job and
	// dead-letter routes.
	tenant string
}

// ForTenant returns a client acting on tenant's jobs and dead letters
// (?tenant=): for an admin key. Any other key naming another tenant than
// its own finds nothing there (ErrNotFound, or ErrForbidden for a
// listing).
func (c *Client) ForTenant(tenant string) *Client {
	cc := *c
	cc.tenant = tenant
	return &cc
}

// New returns a client of the API at baseURL (e.g. "http://127.0.0.1:8080")
// acting with the API key key.
func New(baseURL, key string, o Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("%w: base URL: %w", ErrInvalid, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%w: base URL %q: want http(s)://host[:port]", ErrInvalid, baseURL)
	}
	if key == "" {
		return nil, fmt.Errorf("%w: no API key", ErrInvalid)
	}
	u.RawQuery, u.Fragment = "", ""
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.UserAgent == "" {
		o.UserAgent = "makerfleet-httpapi"
	}
	return &Client{base: strings.TrimSuffix(u.String(), "/"), key: key, hc: o.HTTPClient, ua: o.UserAgent}, nil
}

// Submit submits a job as the key's tenant. A job submitted before
// under the same id answers with Duplicate set; another job under a taken
// id is ErrConflict; an invalid one ErrInvalid naming the failing field
// (e.g. "/params/disks"), and nothing is queued.
func (c *Client) Submit(ctx context.Context, req schemas.JobRequest) (schemas.JobCreated, error) {
	var out schemas.JobCreated
	return out, c.doJSON(ctx, http.MethodPost, "/v1/jobs", nil, req, &out)
}

// Job returns the job's state and progress; another tenant's job is
// ErrNotFound.
func (c *Client) Job(ctx context.Context, id string) (schemas.JobView, error) {
	var out schemas.JobView
	return out, c.doJSON(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, nil, &out)
}

// Result returns the finished job's report: ErrNotFinished (the
// *ProblemError's State says where the job stands) before it has one.
func (c *Client) Result(ctx context.Context, id string) (schemas.JobReport, error) {
	var out schemas.JobReport
	return out, c.doJSON(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/result", nil, nil, &out)
}

// ListOptions select a page of jobs. Zero fields take the server's
// defaults.
type ListOptions struct {
	// State keeps only jobs in this state.
	State string
	// Limit is the page size (server default 50).
	Limit int
	// Cursor is the previous page's NextCursor.
	Cursor string
	// Tenant (admin keys only) lists this tenant's jobs, "*" every
	// tenant's.
	Tenant string
}

// List returns a page of the key's tenant's jobs by job id (generated
// ids are time-ordered: oldest first); NextCursor fetches the next. A
// page filtered by State may hold fewer than Limit jobs and still have a
// NextCursor.
func (c *Client) List(ctx context.Context, o ListOptions) (schemas.JobList, error) {
	q := url.Values{}
	set(q, "state", o.State)
	set(q, "cursor", o.Cursor)
	set(q, "tenant", o.Tenant)
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var out schemas.JobList
	return out, c.doJSON(ctx, http.MethodGet, "/v1/jobs", q, nil, &out)
}

// Pause asks the job to pause at its next step boundary.
func (c *Client) Pause(ctx context.Context, id string) (schemas.ControlResult, error) {
	return c.control(ctx, id, "pause", nil)
}

// Resume asks a paused (or budget-exhausted) job to run on.
func (c *Client) Resume(ctx context.Context, id string) (schemas.ControlResult, error) {
	return c.control(ctx, id, "resume", nil)
}

// Cancel asks the job to end at its next step boundary.
func (c *Client) Cancel(ctx context.Context, id string) (schemas.ControlResult, error) {
	return c.control(ctx, id, "cancel", nil)
}

// Decide answers the step the job waits at for a person; any other step
// is ErrNotWaiting. Only a person's key decides: an approver key (its own
// tenant's jobs) or an admin key; another key is ErrForbidden. The fleet
// records the decision as by the key's name (its prefix when it has none).
func (c *Client) Decide(ctx context.Context, id string, d schemas.DecideBody) (schemas.ControlResult, error) {
	return c.control(ctx, id, "decide", d)
}

func (c *Client) control(ctx context.Context, id, action string, body any) (schemas.ControlResult, error) {
	if body == nil {
		body = struct{}{}
	}
	var out schemas.ControlResult
	return out, c.doJSON(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/"+action, nil, body, &out)
}

// Usage returns the key's tenant's spend today, jobs and quota.
func (c *Client) Usage(ctx context.Context) (schemas.Usage, error) {
	var out schemas.Usage
	return out, c.doJSON(ctx, http.MethodGet, "/v1/usage", nil, nil, &out)
}

// Budget returns the job's budget: its limit, what it spent and what it
// has reserved.
func (c *Client) Budget(ctx context.Context, id string) (schemas.JobBudget, error) {
	var out schemas.JobBudget
	return out, c.doJSON(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/budget", nil, nil, &out)
}

// SetBudget sets the job's budget in US dollars (0: none of its own);
// raise it, then Resume a budget_exhausted job.
func (c *Client) SetBudget(ctx context.Context, id string, usd float64) (schemas.JobBudget, error) {
	var out schemas.JobBudget
	return out, c.doJSON(ctx, http.MethodPut, "/v1/jobs/"+url.PathEscape(id)+"/budget", nil, schemas.BudgetBody{BudgetUSD: usd}, &out)
}

// DeadLetters returns the tenant's dead letters (of job, when not ""),
// oldest first, at most limit (0: the server's default, 100).
func (c *Client) DeadLetters(ctx context.Context, job string, limit int) ([]schemas.StoredDeadLetter, error) {
	q := url.Values{}
	set(q, "job", job)
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out schemas.DeadLetterList
	return out.DeadLetters, c.doJSON(ctx, http.MethodGet, "/v1/dlq", q, nil, &out)
}

// Tasks lists the tasks jobs may name: built-ins and registered specs.
func (c *Client) Tasks(ctx context.Context) ([]schemas.TaskInfo, error) {
	var out schemas.TaskList
	return out.Tasks, c.doJSON(ctx, http.MethodGet, "/v1/tasks", nil, nil, &out)
}

// TaskVersions lists the tasks jobs may name with every registered
// version of each spec (Tasks lists only the latest), oldest first per
// name.
func (c *Client) TaskVersions(ctx context.Context) ([]schemas.TaskInfo, error) {
	var out schemas.TaskList
	return out.Tasks, c.doJSON(ctx, http.MethodGet, "/v1/tasks", url.Values{"versions": {"all"}}, nil, &out)
}

// Task returns a task: a built-in, or a registered spec's versions and
// source (version "": the latest).
func (c *Client) Task(ctx context.Context, name, version string) (schemas.TaskInfo, error) {
	q := url.Values{}
	set(q, "version", version)
	var out schemas.TaskInfo
	return out, c.doJSON(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(name), q, nil, &out)
}

// BatchOptions configure a batch. Zero fields take the server's defaults.
type BatchOptions struct {
	// Priority of the lines that set none, 0 to 9 (default 0).
	Priority int
	// Window is the most jobs of the batch unfinished at once (default 32).
	Window int
	// Webhook is a URL the batch's end is POSTed to (optional).
	Webhook string
}

// SubmitBatch sends a batch, one job per JSONL line read from r
// ({"custom_id": ..., "task": ..., "params": {...}, "k": ...}), streamed
// (r is not read into memory). Invalid lines are kept in the batch's
// error file and the rest runs; a duplicate custom_id refuses the whole
// batch (ErrInvalid).
func (c *Client) SubmitBatch(ctx context.Context, r io.Reader, o BatchOptions) (schemas.BatchRecord, error) {
	q := url.Values{}
	if o.Priority != 0 {
		q.Set("priority", strconv.Itoa(o.Priority))
	}
	if o.Window != 0 {
		q.Set("window", strconv.Itoa(o.Window))
	}
	if o.Webhook != "" {
		q.Set("webhook", o.Webhook)
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/batches", q, r, "application/jsonl")
	if err != nil {
		return schemas.BatchRecord{}, err
	}
	var out schemas.BatchRecord
	return out, decodeJSON(resp, &out)
}

// Batch returns the batch's state and counts.
func (c *Client) Batch(ctx context.Context, id string) (schemas.BatchRecord, error) {
	var out schemas.BatchRecord
	return out, c.doJSON(ctx, http.MethodGet, "/v1/batches/"+url.PathEscape(id), nil, nil, &out)
}

// ListBatches returns the key's tenant's batches.
func (c *Client) ListBatches(ctx context.Context) ([]schemas.BatchRecord, error) {
	var out schemas.BatchList
	return out.Batches, c.doJSON(ctx, http.MethodGet, "/v1/batches", nil, nil, &out)
}

// CancelBatch cancels the batch: no more of its jobs start, its
// unfinished jobs are cancelled.
func (c *Client) CancelBatch(ctx context.Context, id string) (schemas.BatchRecord, error) {
	var out schemas.BatchRecord
	return out, c.doJSON(ctx, http.MethodPost, "/v1/batches/"+url.PathEscape(id)+"/cancel", nil, struct{}{}, &out)
}

// BatchOutput copies the batch's output to w as the server streams it:
// JSONL, one schemas.BatchOutputLine per input line, in input order.
func (c *Client) BatchOutput(ctx context.Context, id string, w io.Writer) error {
	return c.copyTo(ctx, "/v1/batches/"+url.PathEscape(id)+"/output", w)
}

// BatchErrors copies the batch's error file to w: JSONL, one line per
// failed input line, with its line number and error.
func (c *Client) BatchErrors(ctx context.Context, id string, w io.Writer) error {
	return c.copyTo(ctx, "/v1/batches/"+url.PathEscape(id)+"/errors", w)
}

func (c *Client) copyTo(ctx context.Context, path string, w io.Writer) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil, nil, "")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("httpapi: read %s: %w", path, err)
	}
	return nil
}

func set(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

// doJSON sends body (nil: none) as JSON and decodes the answer into out.
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var r io.Reader
	ctype := ""
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		r, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, method, path, q, r, ctype)
	if err != nil {
		return err
	}
	return decodeJSON(resp, out)
}

// do sends a request and returns a successful (2xx) answer; any other is
// a *ProblemError.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, ctype string) (*http.Response, error) {
	// path's variable segments are escaped (url.PathEscape) by the caller.
	if c.tenant != "" && (strings.HasPrefix(path, "/v1/jobs") || path == "/v1/dlq") {
		if q == nil {
			q = url.Values{}
		}
		q.Set("tenant", c.tenant)
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("User-Agent", c.ua)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("httpapi: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }()
	return nil, problemOf(resp)
}

// problemOf reads an error answer: its problem details, or, from a server
// (or proxy) that sends none, a problem made of its status.
func problemOf(resp *http.Response) *ProblemError {
	pe := &ProblemError{Problem: schemas.Problem{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			pe.RetryAfter = time.Duration(n) * time.Second
		}
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		var p schemas.Problem
		if json.Unmarshal(data, &p) == nil && p.Status != 0 {
			pe.Problem = p
			return pe
		}
	}
	if d := strings.TrimSpace(string(data)); d != "" {
		pe.Detail = clip(d, 300)
	}
	return pe
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// decodeJSON decodes a successful answer's body into out and closes it.
func decodeJSON(resp *http.Response, out any) error {
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("httpapi: read %s %s answer: %w", resp.Request.Method, resp.Request.URL.Path, err)
	}
	return nil
}
