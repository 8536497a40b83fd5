package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// actingTenant is the tenant a request acts on: the key's own, or for an
// admin key the one ?tenant= names. A non-admin key naming another
// tenant is refused (403); a malformed tenant is 400.
func actingTenant(r *http.Request, p apikey.Principal) (string, error) {
	t := r.URL.Query().Get("tenant")
	if t == "" || t == p.Tenant {
		return p.Tenant, nil
	}
	if !p.Admin {
		return "", problem(TypeForbidden, "only an admin key acts on another tenant")
	}
	if t != "*" && schemas.ValidTenant(t) != nil {
		return "", problem(TypeBadRequest, "tenant %q is not a tenant id (%s)", t, schemas.TenantRule)
	}
	return t, nil
}

// jobRef is the tenant and job id a job route names. A malformed id is
// no job: 404, as an unknown one; so is another tenant's job named by a
// non-admin key's ?tenant= (404, never 403: another tenant's ids look
// unknown).
func jobRef(r *http.Request, p apikey.Principal) (tenant, id string, err error) {
	if t := r.URL.Query().Get("tenant"); !p.Admin && t != "" && t != p.Tenant {
		return "", "", problem(TypeNotFound, "no such job")
	}
	if tenant, err = actingTenant(r, p); err != nil {
		return "", "", err
	}
	if tenant == "*" {
		return "", "", problem(TypeBadRequest, "name one tenant")
	}
	id = r.PathValue("id")
	if schemas.ValidJobID(id) != nil {
		return "", "", problem(TypeNotFound, "no such job")
	}
	return tenant, id, nil
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ apikey.Principal) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !s.deps.NC.IsConnected() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("nats disconnected\n"))
		return nil
	}
	_, _ = w.Write([]byte("ok\n"))
	return nil
}

// submitJob is POST /v1/jobs.
func (s *Server) submitJob(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	var req schemas.JobRequest
	if err := decodeJSON(w, r, s.cfg.MaxJobBytes, &req); err != nil {
		return err
	}
	if req.Tenant != "" && req.Tenant != p.Tenant {
		return invalidField("/tenant", "tenant %q is not this API key's tenant; leave it out", req.Tenant)
	}
	if err := checkWebhook("/webhook", req.Webhook); err != nil {
		return err
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	spec := req.Spec(p.Tenant)
	if req.Calibration != nil {
		if err := s.calibrated(ctx, &req, &spec); err != nil {
			return err
		}
	}
	prices, err := s.priceTable(ctx)
	if err != nil {
		return err
	}
	if err := jobs.PrepareAdmitted(ctx, &spec, s.tasks, prices); err != nil {
		return specProblem(err)
	}
	q, err := s.quotaOf(ctx, spec.Tenant)
	if err != nil {
		return err
	}
	// Under a limit (its budget, its tenant's spend quota), only work the
	// fleet prices: the job's own pricing is no price.
	if err := checkPriced(prices, &spec, q); err != nil {
		return err
	}
	// jobs.PrepareAdmitted refused a budget below the forecast's low end
	// (pricing.Admit); the forecast is the answer's, with the tenant's rate.
	fc, err := s.forecast(ctx, spec, q, prices)
	if err != nil {
		return err
	}
	dup, err := s.enqueue(ctx, &spec)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/jobs/"+spec.JobID)
	status := http.StatusCreated
	if dup {
		status = http.StatusOK
	}
	return writeJSON(w, status, schemas.JobCreated{ID: spec.JobID, Tenant: spec.Tenant, Duplicate: dup, K: spec.K, KBasis: spec.KBasis, Forecast: fc})
}

// quotaOf is the tenant's quota (none without a quota store).
func (s *Server) quotaOf(ctx context.Context, tenant string) (schemas.TenantQuota, error) {
	if s.deps.Quotas == nil {
		return schemas.TenantQuota{}, nil
	}
	q, err := s.deps.Quotas.Get(ctx, tenant)
	if err != nil {
		return q, fmt.Errorf("%w: quota of %s: %w", jobs.ErrUnavailable, tenant, err)
	}
	return q, nil
}

// forecast is the prepared spec's forecast for its tenant's quota q at
// prices (nil without a forecaster).
func (s *Server) forecast(ctx context.Context, spec schemas.JobSpec, q schemas.TenantQuota, prices pricing.Table) (*schemas.Forecast, error) {
	if s.deps.Forecast == nil {
		return nil, nil
	}
	inst, err := task.BindRef(ctx, s.tasks, jobs.TaskRef(spec), spec.Params)
	if err != nil {
		return nil, specProblem(err)
	}
	fc := s.deps.Forecast(spec, inst, q, prices)
	return &fc, nil
}

// enqueue registers the prepared spec and queues it on the job stream, as
// jobs.Submit does, on the topology the server holds: a job id is taken
// once (the same job again is a duplicate, another is jobs.ErrConflict).
func (s *Server) enqueue(ctx context.Context, spec *schemas.JobSpec) (duplicate bool, err error) {
	topo := s.deps.Topo
	if err := jobs.Externalize(ctx, s.inputs, spec); err != nil {
		if errors.Is(err, jobs.ErrInvalid) {
			return false, specProblem(err)
		}
		return false, fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	data, err := schemas.Encode(spec)
	if err != nil {
		return false, fmt.Errorf("%w: %w", jobs.ErrInvalid, err)
	}
	// A finished job no longer registered still speaks for its id.
	if _, _, err := jobs.Get(ctx, topo, spec.Tenant, spec.JobID); errors.Is(err, jobs.ErrNotFound) {
		if e, err := topo.Reports.Get(ctx, bus.JobKey(spec.Tenant, spec.JobID)); err == nil {
			var rep schemas.JobReport
			if schemas.Decode(e.Value(), &rep) == nil {
				return true, jobs.CheckReport(*spec, rep)
			}
		}
	}
	rec := schemas.JobRecord{
		Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: spec.Tenant, JobID: spec.JobID, Spec: *spec,
		Control: schemas.ControlRun, State: schemas.StateQueued, UpdatedAt: time.Now().UTC(),
	}
	switch err := jobs.Register(ctx, topo, &rec); {
	case errors.Is(err, jobs.ErrExists):
		return true, nil
	case err != nil:
		return false, err
	}
	msg := &nats.Msg{Subject: topo.NS.JobSubject(spec.Tenant), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, spec.Tenant+"/"+spec.JobID)
	if _, err := topo.JS.PublishMsg(ctx, msg); err != nil {
		// Registered, so it runs anyway: coordinators scan the registry.
		s.log.Warn("api: queue job on the job stream", "tenant", spec.Tenant, "job", spec.JobID, "err", err)
	}
	return false, nil
}

// getJob is GET /v1/jobs/{id}.
func (s *Server) getJob(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	tenant, id, err := jobRef(r, p)
	if err != nil {
		return err
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	rec, _, err := jobs.Get(ctx, s.deps.Topo, tenant, id)
	if err != nil {
		return err
	}
	v, err := s.view(ctx, rec)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// view is rec's job as the API shows it, with its latest status.
func (s *Server) view(ctx context.Context, rec schemas.JobRecord) (schemas.JobView, error) {
	st, err := jobs.Status(ctx, s.deps.Topo, rec.Tenant, rec.JobID)
	if err != nil {
		return schemas.JobView{}, err
	}
	v := jobView(rec, st)
	if v.Webhook, err = s.jobWebhook(ctx, rec); err != nil {
		return schemas.JobView{}, err
	}
	return v, nil
}

func jobView(rec schemas.JobRecord, st schemas.JobStatus) schemas.JobView {
	sp := rec.Spec
	return schemas.JobView{
		ID: rec.JobID, Tenant: rec.Tenant, Task: sp.Task, TaskVersion: sp.TaskVersion, K: sp.K, KBasis: sp.KBasis,
		Priority: sp.Priority, BudgetUSD: sp.BudgetUSD,
		State: st.State, Finished: rec.Finished, Control: st.Control, Asked: rec.Control,
		Progress: st.Progress, Steps: st.Steps, TotalSteps: st.TotalSteps,
		Samples: st.Samples, Votes: st.Votes, RedFlagged: st.RedFlagged, Errors: st.Errors, Rung: st.Rung, Coordinator: st.Coordinator,
		SpentUSD: st.SpentUSD, ReservedUSD: st.ReservedUSD, FinishCostUSD: st.FinishCostUSD, Reason: st.Reason, Waiting: st.Waiting,
		BatchID: sp.BatchID, BatchLine: sp.BatchLine, SubmittedAt: sp.SubmittedAt, UpdatedAt: st.UpdatedAt,
	}
}

// listJobs is GET /v1/jobs.
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	tenant, err := actingTenant(r, p)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	state := q.Get("state")
	if state != "" && !knownState(state) {
		return problem(TypeBadRequest, "state %q is not a job state", state)
	}
	limit := s.cfg.ListLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > s.cfg.MaxListLimit {
			return problem(TypeBadRequest, "limit %q must be an integer from 1 to %d", l, s.cfg.MaxListLimit)
		}
		limit = n
	}
	after, err := parseCursor(q.Get("cursor"))
	if err != nil {
		return err
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	if tenant == "*" {
		tenant = ""
	}
	// Page by key: list the keys (cheap), read only the records of this
	// page. A state filter reads at most scanLimit records per page, so a
	// page may hold fewer than limit jobs and still have a next cursor.
	keys, err := jobs.Keys(ctx, s.deps.Topo, tenant)
	if err != nil {
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	if after != "" {
		i, found := slices.BinarySearch(keys, after)
		if found {
			i++
		}
		keys = keys[i:]
	}
	out := schemas.JobList{Jobs: []schemas.JobView{}}
	scanLimit := max(limit, scanPerPage*s.cfg.MaxListLimit)
	for i, key := range keys {
		if len(out.Jobs) == limit || i == scanLimit {
			out.NextCursor = encodeCursor(keys[i-1])
			break
		}
		t, id, _ := strings.Cut(key, ".")
		rec, _, err := jobs.Get(ctx, s.deps.Topo, t, id)
		if errors.Is(err, jobs.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		if state != "" && rec.State != state {
			continue
		}
		v, err := s.view(ctx, rec)
		if errors.Is(err, jobs.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		out.Jobs = append(out.Jobs, v)
	}
	return writeJSON(w, http.StatusOK, out)
}

func knownState(s string) bool {
	switch s {
	case schemas.StateQueued, schemas.StateRunning, schemas.StatePaused, schemas.StateBudgetExhausted:
		return true
	}
	return schemas.Terminal(s)
}

// scanPerPage times MaxListLimit is the most records a filtered listing
// reads for one page.
const scanPerPage = 4

// A listing is in key order (tenant, then job id: generated ids are
// time-ordered, so those list in submission order). Its cursor is the
// key of the last job the page looked at, base64url.
func encodeCursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

func parseCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	t, id, ok := strings.Cut(string(b), ".")
	if err != nil || !ok || schemas.ValidTenant(t) != nil || schemas.ValidJobID(id) != nil {
		return "", problem(TypeBadRequest, "cursor %q is not a cursor of this listing", c)
	}
	return string(b), nil
}

// jobResult is GET /v1/jobs/{id}/result.
func (s *Server) jobResult(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	tenant, id, err := jobRef(r, p)
	if err != nil {
		return err
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	rep, err := jobs.Result(ctx, s.deps.Topo, tenant, id)
	if errors.Is(err, jobs.ErrNotFinished) {
		st, serr := jobs.Status(ctx, s.deps.Topo, tenant, id)
		if serr != nil {
			return serr
		}
		pe := problem(TypeNotFinished, "job %s is %s: it has no report yet", id, st.State)
		pe.p.State = st.State
		return pe
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, rep)
}

// control is POST /v1/jobs/{id}/pause, resume and cancel.
func (s *Server) control(action string) handler {
	return func(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
		tenant, id, err := jobRef(r, p)
		if err != nil {
			return err
		}
		ctx, cancel := s.timeout(r.Context())
		defer cancel()
		// A job of another tenant (or none) is 404 before any request.
		if _, _, err := jobs.Get(ctx, s.deps.Topo, tenant, id); err != nil {
			return err
		}
		req := schemas.ControlRequest{Action: action}
		actx, acancel := context.WithTimeout(ctx, s.cfg.AskTimeout)
		out, err := jobs.Ask(actx, s.deps.NC, s.deps.Topo.NS, tenant, id, req)
		acancel()
		if errors.Is(err, nats.ErrNoResponders) {
			// No coordinator runs: the registry is written with the same
			// checks, where this server may write it.
			out, err = jobs.Apply(ctx, s.deps.Topo, tenant, id, req)
		}
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, controlResult(out))
	}
}

func controlResult(out jobs.Outcome) schemas.ControlResult {
	return schemas.ControlResultOf(out.Record, out.Changed)
}

// decide is POST /v1/jobs/{id}/decide: only a person decides, so only an
// approver key (its own tenant's jobs) or an admin key (any tenant's, with
// ?tenant=) may; another key is 403. Who decided is the key's
// (Principal.Person), never the body's: a body naming someone is 422.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	if !p.Approver && !p.Admin {
		return problem(TypeForbidden, "only a person decides a step: an approver key (maker keys create --approver) "+
			"or an admin key; this key is neither")
	}
	tenant, id, err := jobRef(r, p)
	if err != nil {
		return err
	}
	var body schemas.DecideBody
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &body); err != nil {
		if pe := (*problemError)(nil); errors.As(err, &pe) && len(pe.p.Errors) == 1 && pe.p.Errors[0].Path == "/by" {
			return invalidField("/by", "by is not taken: the decision is recorded as by this API key's name (%s); leave by out",
				p.Person())
		}
		return err
	}
	req := schemas.DecideRequest{Header: schemas.NewHeader(schemas.KindDecideRequest), Step: body.Step, VoteKey: body.Answer, By: p.Person()}
	if err := req.Validate(); err != nil {
		path := fieldPath(err)
		if path == "/vote_key" {
			path = "/answer"
		}
		return invalidField(path, "%s", detailOf(err))
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	if _, _, err := jobs.Get(ctx, s.deps.Topo, tenant, id); err != nil {
		return err
	}
	actx, acancel := context.WithTimeout(ctx, s.cfg.AskTimeout)
	out, err := jobs.AskDecide(actx, s.deps.NC, s.deps.Topo.NS, tenant, id, req)
	acancel()
	if errors.Is(err, nats.ErrNoResponders) {
		var rec schemas.JobRecord
		rec, err = jobs.Decide(ctx, s.deps.Topo, tenant, id, req.Decision())
		out = jobs.Outcome{Record: rec, Changed: err == nil}
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, controlResult(out))
}
