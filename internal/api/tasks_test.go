package api_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestTasks: the task routes list the built-ins and the registered specs;
// an admin key registers a spec (once: the same spec again is 200,
// another under its version 409, an invalid one 422 naming its fields),
// and jobs may then name it.
func TestTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	src, err := os.ReadFile("../../examples/tasks/multiply.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var info schemas.TaskInfo
	r := e.do(http.MethodPost, "/v1/tasks", e.admin, "application/yaml", strings.NewReader(string(src)))
	checkBody(t, "TaskInfo", r.body)
	r.decode(t, http.StatusCreated, &info)
	if info.Name != "multiply" || info.Version != "1.0.0" || !strings.HasPrefix(info.Hash, "sha256:") {
		t.Errorf("registered %+v", info)
	}
	e.do(http.MethodPost, "/v1/tasks", e.admin, "application/yaml", strings.NewReader(string(src))).decode(t, http.StatusOK, &info)
	changed := strings.Replace(string(src), "a × b, digit by digit", "a times b, digit by digit", 1)
	e.do(http.MethodPost, "/v1/tasks", e.admin, "text/yaml", strings.NewReader(changed)).problem(t, http.StatusConflict, api.TypeConflict)
	p := e.do(http.MethodPost, "/v1/tasks", e.admin, "application/yaml", strings.NewReader("name: Bad Name\nversion: 1\n")).
		problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
	if len(p.Errors) == 0 {
		t.Errorf("invalid spec: %+v", p)
	}
	e.do(http.MethodPost, "/v1/tasks", e.admin, "image/png", strings.NewReader("x")).problem(t, http.StatusUnsupportedMediaType, api.TypeUnsupportedMedia)
	e.do(http.MethodPost, "/v1/tasks", e.admin, "application/yaml", strings.NewReader("name: hanoi\n")).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)

	var list schemas.TaskList
	r = e.json(http.MethodGet, "/v1/tasks", e.key[beta], nil)
	checkBody(t, "TaskList", r.body)
	r.decode(t, http.StatusOK, &list)
	var names []string
	for _, ti := range list.Tasks {
		names = append(names, ti.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "hanoi") || names[len(names)-1] != "multiply" {
		t.Errorf("tasks %v", names)
	}
	e.json(http.MethodGet, "/v1/tasks/multiply", e.key[beta], nil).decode(t, http.StatusOK, &info)
	if info.Source != string(src) || len(info.Versions) != 1 || info.Builtin {
		t.Errorf("multiply %+v", info)
	}
	e.json(http.MethodGet, "/v1/tasks/hanoi", e.key[beta], nil).decode(t, http.StatusOK, &info)
	if !info.Builtin || info.Name != "hanoi" {
		t.Errorf("hanoi %+v", info)
	}
	e.json(http.MethodGet, "/v1/tasks/nosuch", e.key[beta], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, "/v1/tasks/multiply?version=9.9", e.key[beta], nil).problem(t, http.StatusNotFound, api.TypeNotFound)

	// A job of the registered spec; its params are checked by the spec's
	// schema, failing paths named.
	var c schemas.JobCreated
	e.json(http.MethodPost, "/v1/jobs", e.key[beta], `{"task":"multiply","params":{"a":"12","b":"34"},"k":2}`).decode(t, http.StatusCreated, &c)
	var v schemas.JobView
	e.json(http.MethodGet, "/v1/jobs/"+c.ID, e.key[beta], nil).decode(t, http.StatusOK, &v)
	if v.TaskVersion != "1.0.0" {
		t.Errorf("job %+v", v)
	}
	p = e.json(http.MethodPost, "/v1/jobs", e.key[beta], `{"task":"multiply","params":{"a":"x1","b":"34"},"k":2}`).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
	if len(p.Errors) != 1 || p.Errors[0].Path != "/params/a" {
		t.Errorf("errors %+v", p.Errors)
	}
	p = e.json(http.MethodPost, "/v1/jobs", e.key[beta], `{"task":"multiply","task_version":"2.0.0","params":{"a":"1","b":"34"},"k":2}`).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
	if len(p.Errors) != 1 || p.Errors[0].Path != "/task" {
		t.Errorf("errors %+v", p.Errors)
	}

	// Later versions, registered out of order: the latest is the highest
	// release (1.10.0, not 1.9.0 registered last, nor the 2.0.0-rc1
	// pre-release), in the listing and for a job naming no version; a job
	// may name one as NAME@VERSION.
	for _, version := range []string{"1.10.0", "2.0.0-rc1", "1.9.0"} {
		body := strings.Replace(string(src), "version: 1.0.0", "version: "+version, 1)
		e.do(http.MethodPost, "/v1/tasks", e.admin, "application/yaml", strings.NewReader(body)).decode(t, http.StatusCreated, &info)
	}
	e.json(http.MethodGet, "/v1/tasks", e.key[beta], nil).decode(t, http.StatusOK, &list)
	if last := list.Tasks[len(list.Tasks)-1]; last.Name != "multiply" || last.Version != "1.10.0" {
		t.Errorf("listed latest %+v, want multiply 1.10.0", last)
	}
	e.json(http.MethodPost, "/v1/jobs", e.key[beta], `{"task":"multiply","params":{"a":"12","b":"34"},"k":2}`).decode(t, http.StatusCreated, &c)
	e.json(http.MethodGet, "/v1/jobs/"+c.ID, e.key[beta], nil).decode(t, http.StatusOK, &v)
	if v.TaskVersion != "1.10.0" {
		t.Errorf("a job naming no version pinned %q, want 1.10.0", v.TaskVersion)
	}
	e.json(http.MethodPost, "/v1/jobs", e.key[beta], `{"task":"multiply@2.0.0-rc1","params":{"a":"12","b":"34"},"k":2}`).decode(t, http.StatusCreated, &c)
	e.json(http.MethodGet, "/v1/jobs/"+c.ID, e.key[beta], nil).decode(t, http.StatusOK, &v)
	if v.TaskVersion != "2.0.0-rc1" || v.Task != "multiply" {
		t.Errorf("a job naming multiply@2.0.0-rc1 pinned %s %q", v.Task, v.TaskVersion)
	}
}
