package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// TestBatch runs a batch through the API: an invalid line is in the error
// file by its number and the rest runs; the output has one line per input
// line in input order; another tenant's batch is 404.
func TestBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{run: true})
	body := strings.Join([]string{
		`{"custom_id":"a","task":"hanoi","params":{"disks":2},"k":2}`,
		`{"custom_id":"b","task":"hanoi","params":{"disks":99},"k":2}`,
		`not json`,
		`{"custom_id":"d","task":"hanoi","params":{"disks":3},"seed":5}`, // k planned
	}, "\n") + "\n"
	r := e.do(http.MethodPost, "/v1/batches?priority=3&window=2", e.key[alpha], "application/jsonl", strings.NewReader(body))
	checkBody(t, "BatchRecord", r.body)
	var rec schemas.BatchRecord
	r.decode(t, http.StatusCreated, &rec)
	if rec.Tenant != alpha || rec.Counts.Total != 4 || rec.Counts.Valid != 2 || rec.Counts.Invalid != 2 || rec.Priority != 3 || rec.Window != 2 {
		t.Fatalf("created %+v", rec)
	}
	if r.header.Get("Location") != "/v1/batches/"+rec.ID {
		t.Errorf("Location %q", r.header.Get("Location"))
	}
	e.json(http.MethodGet, "/v1/batches/"+rec.ID, e.key[beta], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, "/v1/batches/"+rec.ID+"/output", e.key[beta], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodPost, "/v1/batches/"+rec.ID+"/cancel", e.key[beta], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, "/v1/batches/batch_nosuch", e.key[alpha], nil).problem(t, http.StatusNotFound, api.TypeNotFound)
	e.json(http.MethodGet, "/v1/batches/NOT-AN-ID", e.key[alpha], nil).problem(t, http.StatusNotFound, api.TypeNotFound)

	// Wait for the batch to end, on its record's changes.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := batch.NewStore(e.fleet.Topo, taskreg.New(e.fleet.Topo.Tasks, e.fleet.Tasks, taskspec.CompileSpec))
	done, err := st.Wait(ctx, alpha, rec.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got schemas.BatchRecord
	e.json(http.MethodGet, "/v1/batches/"+rec.ID, e.key[alpha], nil).decode(t, http.StatusOK, &got)
	if got.State != schemas.BatchCompleted || got.Counts.Completed != 2 || got.Counts.Failed != 2 || done.State != got.State {
		t.Errorf("ended %+v", got)
	}
	var list schemas.BatchList
	e.json(http.MethodGet, "/v1/batches", e.key[alpha], nil).decode(t, http.StatusOK, &list)
	if len(list.Batches) != 1 || list.Batches[0].ID != rec.ID {
		t.Errorf("alpha's batches %+v", list)
	}
	e.json(http.MethodGet, "/v1/batches", e.key[beta], nil).decode(t, http.StatusOK, &list)
	if len(list.Batches) != 0 {
		t.Errorf("beta's batches %+v", list)
	}

	out := e.json(http.MethodGet, "/v1/batches/"+rec.ID+"/output", e.key[alpha], nil)
	if out.status != http.StatusOK || out.header.Get("Content-Type") != "application/jsonl" {
		t.Fatalf("output: %d %s", out.status, out.body)
	}
	lines := jsonLines(t, out.body)
	var ids []string
	for i, l := range lines {
		ids = append(ids, fmt.Sprintf("%d:%s", l.Line, l.CustomID))
		if l.Line != int64(i+1) {
			t.Errorf("output line %d is input line %d", i+1, l.Line)
		}
	}
	if fmt.Sprint(ids) != "[1:a 2:b 3: 4:d]" {
		t.Errorf("output lines %v", ids)
	}
	if lines[0].Response == nil || lines[0].Response.State != schemas.StateSolved || lines[3].Response == nil {
		t.Fatalf("valid lines without their reports: %+v", lines)
	}
	if want, _ := plan.KMin(schemas.DefaultP, 7, schemas.DefaultTarget); lines[3].Response.K != want || lines[0].Response.K != 2 {
		t.Errorf("line d (no k) ran at k %d, want the planned %d; line a at %d, want its own 2", lines[3].Response.K, want, lines[0].Response.K)
	}
	if lines[1].Error == nil || lines[1].Error.Code != schemas.BatchErrInvalidParams || lines[2].Error == nil {
		t.Errorf("invalid lines without their errors: %+v %+v", lines[1].Error, lines[2].Error)
	}
	errs := jsonLines(t, e.json(http.MethodGet, "/v1/batches/"+rec.ID+"/errors", e.key[alpha], nil).body)
	if len(errs) != 2 || errs[0].Line != 2 || errs[1].Line != 3 {
		t.Errorf("error file %+v", errs)
	}
	e.json(http.MethodPost, "/v1/batches/"+rec.ID+"/cancel", e.key[alpha], nil).problem(t, http.StatusConflict, api.TypeConflict)
}

// TestBatchRefusals: a refused batch stores nothing and runs nothing.
func TestBatchRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{MaxBatchBytes: 1024}})
	line := `{"custom_id":"x","task":"hanoi","params":{"disks":2},"k":2}` + "\n"
	cases := []struct {
		name, ctype, query, body string
		status                   int
		typ                      string
	}{
		{"duplicate custom_id", "application/jsonl", "", line + line, 422, api.TypeInvalid},
		{"empty", "application/x-ndjson", "", "", 422, api.TypeInvalid},
		{"too large", "text/plain", "", strings.Repeat(line, 40), 413, api.TypeTooLarge},
		{"json media type", "application/json", "", line, 415, api.TypeUnsupportedMedia},
		{"priority", "application/jsonl", "?priority=10", line, 400, api.TypeBadRequest},
		{"window", "application/jsonl", "?window=0", line, 400, api.TypeBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.do(http.MethodPost, "/v1/batches"+c.query, e.key[alpha], c.ctype, strings.NewReader(c.body)).problem(t, c.status, c.typ)
		})
	}
	var list schemas.BatchList
	e.json(http.MethodGet, "/v1/batches", e.key[alpha], nil).decode(t, http.StatusOK, &list)
	if len(list.Batches) != 0 {
		t.Errorf("refused batches were stored: %+v", list.Batches)
	}
	if n, _ := e.enqueued(); n != 0 {
		t.Errorf("%d jobs registered", n)
	}
}

func jsonLines(t *testing.T, b []byte) []schemas.BatchOutputLine {
	t.Helper()
	var out []schemas.BatchOutputLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		checkBody(t, "BatchOutputLine", sc.Bytes())
		var l schemas.BatchOutputLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %s: %v", sc.Bytes(), err)
		}
		out = append(out, l)
	}
	return out
}
