package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/spec"
)

// listTasks is GET /v1/tasks: the built-ins, then each registered spec at
// its latest version.
func (s *Server) listTasks(w http.ResponseWriter, r *http.Request, _ apikey.Principal) error {
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	out := schemas.TaskList{Tasks: []schemas.TaskInfo{}}
	for _, n := range s.deps.Tasks.Names() {
		out.Tasks = append(out.Tasks, schemas.TaskInfo{Name: n, Builtin: true})
	}
	recs, err := s.tasks.List(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	// List is by name, then version; ?versions=all keeps every version,
	// else each name's latest (taskreg.Latest).
	all := r.URL.Query().Get("versions") == "all"
	for i := 0; i < len(recs); {
		j := i
		for j < len(recs) && recs[j].Name == recs[i].Name {
			j++
		}
		if all {
			for _, rec := range recs[i:j] {
				out.Tasks = append(out.Tasks, schemas.TaskInfoOf(rec))
			}
		} else {
			out.Tasks = append(out.Tasks, schemas.TaskInfoOf(taskreg.Latest(recs[i:j])))
		}
		i = j
	}
	return writeJSON(w, http.StatusOK, out)
}

// getTask is GET /v1/tasks/{name}.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request, _ apikey.Principal) error {
	name, version := r.PathValue("name"), r.URL.Query().Get("version")
	if _, err := s.deps.Tasks.Lookup(name); err == nil && version == "" {
		return writeJSON(w, http.StatusOK, schemas.TaskInfo{Name: name, Builtin: true})
	}
	notFound := problem(TypeNotFound, "no task %q", name)
	if !schemas.ValidTaskSpecName(name) || version != "" && !schemas.ValidTaskSpecVersion(version) {
		return notFound
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	rec, err := s.tasks.Get(ctx, name, version)
	if errors.Is(err, taskreg.ErrNotFound) {
		return notFound
	}
	if err != nil {
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	all, err := s.tasks.List(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	info := schemas.TaskInfoOf(rec)
	info.Source = rec.Source
	for _, o := range all {
		if o.Name == name {
			info.Versions = append(info.Versions, o.TaskVersion)
		}
	}
	return writeJSON(w, http.StatusOK, info)
}

// registerTask is POST /v1/tasks (admin).
func (s *Server) registerTask(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	if _, err := mediaType(r, "application/yaml", "application/json", "text/yaml", "text/plain", "application/x-yaml"); err != nil {
		return err
	}
	src, err := readBody(w, r, s.cfg.MaxTaskBytes)
	if err != nil {
		return err
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	rec, created, err := s.tasks.Register(ctx, src, "api-key:"+p.KeyID)
	var probs spec.Errors
	switch {
	case errors.As(err, &probs):
		pe := problem(TypeInvalid, "the task spec has %d problem(s)", len(probs))
		for _, pr := range probs {
			path := "/" + strings.NewReplacer(".", "/", "[", "/", "]", "").Replace(pr.Path)
			pe.p.Errors = append(pe.p.Errors, schemas.FieldError{Path: path, Message: pr.String()})
		}
		return pe
	case errors.Is(err, spec.ErrInvalid):
		return invalidField("", "%v", err)
	case errors.Is(err, taskreg.ErrConflict), errors.Is(err, taskreg.ErrBuiltin):
		return problem(TypeConflict, "%s", strings.TrimPrefix(err.Error(), "taskreg: "))
	case err != nil:
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeJSON(w, status, schemas.TaskInfoOf(rec))
}

// usage is GET /v1/usage.
func (s *Server) usage(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	u := schemas.Usage{Tenant: p.Tenant, Day: store.Day(time.Now()), Jobs: map[string]int64{}}
	recs, err := jobs.List(ctx, s.deps.Topo, p.Tenant)
	if err != nil {
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	for _, rec := range recs {
		u.Jobs[rec.State]++
		if rec.State == schemas.StateRunning {
			u.RunningJobs++
		}
	}
	if s.deps.Budgets != nil {
		a, err := s.deps.Budgets.TenantDay(ctx, p.Tenant, u.Day)
		if err != nil {
			return fmt.Errorf("%w: spend of %s: %w", jobs.ErrUnavailable, p.Tenant, err)
		}
		u.SpentTodayUSD, u.ReservedTodayUSD = a.Spent.USD(), a.Reserved.USD()
	}
	if s.deps.Inflight != nil {
		n, err := s.deps.Inflight.InFlight(ctx, p.Tenant)
		if err != nil {
			return fmt.Errorf("%w: samples in flight of %s: %w", jobs.ErrUnavailable, p.Tenant, err)
		}
		u.InflightSamples = int64(n)
	}
	if s.deps.Quotas != nil {
		if u.Quota, err = s.deps.Quotas.Get(ctx, p.Tenant); err != nil {
			return fmt.Errorf("%w: quota of %s: %w", jobs.ErrUnavailable, p.Tenant, err)
		}
	}
	if s.deps.Inflight != nil && u.Quota.MaxRunningJobs > 0 {
		// What the quota counts: the jobs holding its slots (the registry
		// may still say running of a job that just ended).
		n, err := s.deps.Inflight.Running(ctx, p.Tenant)
		if err != nil {
			return fmt.Errorf("%w: running jobs of %s: %w", jobs.ErrUnavailable, p.Tenant, err)
		}
		u.RunningJobs = int64(n)
	}
	u.Quota.Header = schemas.NewHeader(schemas.KindTenantQuota)
	u.Quota.Tenant = p.Tenant
	return writeJSON(w, http.StatusOK, u)
}

// quotaTenant is the tenant a quota route names ("" for the fleet's
// record under schemas.FleetQuotaKey).
func (s *Server) quotaTenant(r *http.Request) (string, error) {
	if s.deps.Quotas == nil {
		return "", problem(TypeNotImplemented, "this server has no quota store")
	}
	t := r.PathValue("tenant")
	if t == schemas.FleetQuotaKey {
		return "", nil
	}
	if schemas.ValidTenant(t) != nil {
		return "", problem(TypeNotFound, "no tenant %q (%s, or %s for the fleet's limits)", t, schemas.TenantRule, schemas.FleetQuotaKey)
	}
	return t, nil
}

// getQuota is GET /v1/quotas/{tenant} (admin).
func (s *Server) getQuota(w http.ResponseWriter, r *http.Request, _ apikey.Principal) error {
	t, err := s.quotaTenant(r)
	if err != nil {
		return err
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	// The bucket, not the store's watch-fed cache: an admin reads what
	// they just wrote.
	key := t
	if key == "" {
		key = schemas.FleetQuotaKey
	}
	var q schemas.TenantQuota
	cur, _, err := bus.NewKV(s.deps.Topo.Quotas, bus.MessageCodec[schemas.TenantQuota]()).Get(ctx, key)
	switch {
	case errors.Is(err, bus.ErrNotFound):
	case err != nil:
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	default:
		q = *cur
	}
	q.Header, q.Tenant = schemas.NewHeader(schemas.KindTenantQuota), t
	return writeJSON(w, http.StatusOK, q)
}

// putQuota is PUT /v1/quotas/{tenant} (admin): the whole record; the
// header, tenant and updated_at may be left out.
func (s *Server) putQuota(w http.ResponseWriter, r *http.Request, _ apikey.Principal) error {
	t, err := s.quotaTenant(r)
	if err != nil {
		return err
	}
	var q schemas.TenantQuota
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &q); err != nil {
		return err
	}
	if q.Tenant != "" && q.Tenant != t {
		return invalidField("/tenant", "tenant %q is not the path's %q; leave it out", q.Tenant, r.PathValue("tenant"))
	}
	if q.Kind != "" && q.Kind != schemas.KindTenantQuota || q.Version != 0 && q.Version != schemas.Version {
		return invalidField("/kind", "kind and version, when given, must be %s and %d", schemas.KindTenantQuota, schemas.Version)
	}
	q.Tenant = t
	q.Header = schemas.NewHeader(schemas.KindTenantQuota)
	if err := q.Validate(); err != nil {
		return invalidField(quotaPath(q, err), "%s", detailOf(err))
	}
	ctx, cancel := s.timeout(r.Context())
	defer cancel()
	out, err := s.deps.Quotas.Set(ctx, q)
	if err != nil {
		return fmt.Errorf("%w: %w", jobs.ErrUnavailable, err)
	}
	out.Tenant = t
	return writeJSON(w, http.StatusOK, out)
}

// quotaPath is the field a quota's validation error names: one message
// names the three counts, so the first out of range is the one.
func quotaPath(q schemas.TenantQuota, err error) string {
	p := fieldPath(err)
	if p != "/max_running_jobs" {
		return p
	}
	const most = 1_000_000
	for _, c := range []struct {
		path string
		v    int
	}{{"/max_running_jobs", q.MaxRunningJobs}, {"/max_inflight_samples", q.MaxInflightSamples}, {"/burst", q.Burst}} {
		if c.v < 0 || c.v > most {
			return c.path
		}
	}
	return p
}
