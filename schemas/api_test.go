package schemas

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// fill sets every field of the struct v points to a non-zero value of its
// own (n counts up, so no two fields of a kind are equal), recursing
// into pointers to structs; it returns the next n.
func fill(t *testing.T, v reflect.Value, n int) int {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanSet() {
			continue
		}
		n++
		switch f.Kind() {
		case reflect.String:
			f.SetString("v" + strings.Repeat("x", n))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(n))
		case reflect.Float64:
			f.SetFloat(float64(n) + 0.5)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			switch f.Type() {
			case reflect.TypeFor[json.RawMessage]():
				f.SetBytes([]byte(`{"n":` + strings.Repeat("1", n) + `}`))
			case reflect.TypeFor[[]string]():
				f.Set(reflect.ValueOf([]string{"m" + strings.Repeat("x", n)}))
			case reflect.TypeFor[[]WebhookAttempt]():
				s := reflect.MakeSlice(f.Type(), 1, 1)
				n = fill(t, s.Index(0), n)
				f.Set(s)
			default:
				t.Fatalf("fill: field %s: slice type %v (teach fill)", v.Type().Field(i).Name, f.Type())
			}
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			switch p.Elem().Kind() {
			case reflect.Struct:
				n = fill(t, p.Elem(), n)
			case reflect.Float64:
				p.Elem().SetFloat(float64(n) + 0.25)
			default:
				t.Fatalf("fill: field %s: pointer type %v (teach fill)", v.Type().Field(i).Name, f.Type())
			}
			f.Set(p)
		case reflect.Struct:
			switch f.Type() {
			case reflect.TypeFor[time.Time]():
				f.Set(reflect.ValueOf(time.Unix(int64(n)*1000, 0).UTC()))
			default:
				n = fill(t, f, n)
			}
		default:
			t.Fatalf("fill: field %s: kind %v (teach fill)", v.Type().Field(i).Name, f.Kind())
		}
	}
	return n
}

// differing names the top-level fields of two values of one struct type
// that are not deeply equal.
func differing(a, b reflect.Value) []string {
	var out []string
	for i := range a.NumField() {
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, a.Type().Field(i).Name)
		}
	}
	return out
}

// TestJobRequestRoundTrip: a spec sent over the HTTP API (Request) comes
// back as the same spec (JobRequest.Spec), every field but JobSpecOnly;
// a JobSpec field added without a place in JobRequest (or in JobSpecOnly)
// fails here, and so does a JobRequest field Spec or Request forgets.
func TestJobRequestRoundTrip(t *testing.T) {
	t.Parallel()
	var spec JobSpec
	fill(t, reflect.ValueOf(&spec).Elem(), 0)
	back := spec.Request().Spec(spec.Tenant)
	got := differing(reflect.ValueOf(spec), reflect.ValueOf(back))
	want := slices.Clone(JobSpecOnly)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("JobSpec fields lost on the way through JobRequest: %v; want exactly JobSpecOnly %v", got, want)
	}
	for _, name := range JobSpecOnly {
		if _, ok := reflect.TypeFor[JobSpec]().FieldByName(name); !ok {
			t.Errorf("JobSpecOnly names %s, which JobSpec does not have", name)
		}
		if _, ok := reflect.TypeFor[JobRequest]().FieldByName(name); ok {
			t.Errorf("JobSpecOnly names %s, which JobRequest has: carry it", name)
		}
	}

	var req JobRequest
	fill(t, reflect.ValueOf(&req).Elem(), 0)
	again := req.Spec(req.Tenant).Request()
	lost := differing(reflect.ValueOf(req), reflect.ValueOf(again))
	slices.Sort(lost)
	if wantLost := slices.Sorted(slices.Values(JobRequestOnly)); !slices.Equal(lost, wantLost) {
		t.Errorf("JobRequest fields lost on the way through JobSpec: %v; want exactly JobRequestOnly %v", lost, wantLost)
	}
	// The same field is the same JSON name in both.
	for f := range reflect.TypeFor[JobRequest]().Fields() {
		if slices.Contains(JobRequestOnly, f.Name) {
			continue
		}
		sf, ok := reflect.TypeFor[JobSpec]().FieldByName(f.Name)
		if !ok || strings.Split(sf.Tag.Get("json"), ",")[0] != strings.Split(f.Tag.Get("json"), ",")[0] {
			t.Errorf("JobRequest.%s (json %q) has no JobSpec field of the same name and JSON name", f.Name, f.Tag.Get("json"))
		}
	}
}

// TestJobViewStatus: a JobView carries every field of a JobStatus under
// the same JSON name (the job's id is the view's "id"), and Status copies
// each: a JobStatus field added without a place in JobView fails here.
func TestJobViewStatus(t *testing.T) {
	t.Parallel()
	var v JobView
	fill(t, reflect.ValueOf(&v).Elem(), 0)
	st := v.Status()
	if st.Header != NewHeader(KindJobStatus) {
		t.Errorf("header %+v", st.Header)
	}
	views := map[string]reflect.Value{}
	vv := reflect.ValueOf(v)
	for i, f := range slices.Collect(reflect.TypeFor[JobView]().Fields()) {
		views[strings.Split(f.Tag.Get("json"), ",")[0]] = vv.Field(i)
	}
	sv := reflect.ValueOf(st)
	for i, f := range slices.Collect(reflect.TypeFor[JobStatus]().Fields()) {
		if f.Anonymous {
			continue
		}
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if name == "job_id" {
			name = "id"
		}
		w, ok := views[name]
		if !ok {
			t.Errorf("JobStatus.%s (%s) has no JobView field", f.Name, name)
			continue
		}
		if !reflect.DeepEqual(sv.Field(i).Interface(), w.Interface()) {
			t.Errorf("Status() leaves %s out: %v, the view has %v", name, sv.Field(i).Interface(), w.Interface())
		}
	}
}

// TestControlResultOf and TestTaskInfoRecord: the record's fields, and a
// task record through the API and back.
func TestControlResultOf(t *testing.T) {
	t.Parallel()
	d := &PersonDecision{Step: 3, VoteKey: "k", By: "alice", At: time.Unix(5, 0).UTC()}
	rec := JobRecord{Tenant: "acme", JobID: "j1", State: StatePaused, Control: ControlPause, Decision: d}
	want := ControlResult{ID: "j1", Tenant: "acme", State: StatePaused, Control: ControlPause, Changed: true, Decision: d}
	if got := ControlResultOf(rec, true); !reflect.DeepEqual(got, want) {
		t.Errorf("ControlResultOf = %+v, want %+v", got, want)
	}
}

func TestTaskInfoRecord(t *testing.T) {
	t.Parallel()
	var rec TaskRecord
	fill(t, reflect.ValueOf(&rec).Elem(), 0)
	rec.Header = NewHeader(KindTaskRecord)
	info := TaskInfoOf(rec)
	info.Source = rec.Source // GET /v1/tasks/{name} adds it
	if back := info.Record(); !reflect.DeepEqual(back, rec) {
		t.Errorf("a task record through TaskInfo lost %v", differing(reflect.ValueOf(rec), reflect.ValueOf(back)))
	}
}
