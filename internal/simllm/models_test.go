package simllm

import (
	"encoding/json"
	"strings"
	"testing"
)

// With Models set the server serves Model and Models only; "@fault"
// suffixes and AnyModel follow the rule in Config.Models.
func TestServedModels(t *testing.T) {
	t.Parallel()
	strict := newServer(t, Config{Models: []string{"strong", "org/panel-a", "strong"}})
	anyName := newServer(t, Config{Model: "main", Models: []string{AnyModel}})
	open := newServer(t, Config{})
	tests := []struct {
		name   string
		s      *Server
		model  string
		status int
	}{
		{"Model", strict, "sim-1", 200},
		{"a listed model", strict, "strong", 200},
		{"a listed name with a slash", strict, "org/panel-a", 200},
		{"a fault suffix", strict, "strong@slow@fail", 200}, // not a break-glass prompt: the suffix does nothing
		{"unknown", strict, "gpt-9", 404},
		{"unknown with a suffix", strict, "gpt-9@fail", 404},
		{"prefix of a listed one", strict, "stron", 404},
		{"case differs", strict, "Strong", 404},
		{"any: Model", anyName, "main", 200},
		{"any: anything", anyName, "gpt-9", 200},
		{"no Models: anything", open, "whatever", 200},
	}
	in := mustInstance(t, 3)
	for _, tt := range tests {
		w := post(tt.s, chatBody(t, in, in.Initial(), map[string]any{"model": tt.model}))
		if w.Code != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.name, w.Code, tt.status, w.Body)
			continue
		}
		if tt.status == 404 {
			want := `{"error":{"message":"The model ` + "`" + tt.model + "`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`
			if w.Body.String() != want {
				t.Errorf("%s: body\n%s\nwant\n%s", tt.name, w.Body, want)
			}
		}
	}
	if st := strict.Stats(); st.UnknownModels != 4 || st.Completions != 4 || st.Requests != 8 {
		t.Errorf("stats %+v", st)
	}
}

func TestModelsList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		listed  []string
		missing string
	}{
		{"default", Config{}, []string{"sim-1"}, "gpt-9"},
		{"models after Model, repeats once", Config{Model: "a", Models: []string{"b", "a", AnyModel, "c/d", "b"}}, []string{"a", "b", "c/d"}, AnyModel},
	}
	for _, tt := range tests {
		s := newServer(t, tt.cfg)
		var list struct {
			Data []struct{ ID string } `json:"data"`
		}
		if err := json.Unmarshal(do(s, "GET", "/v1/models", "").Body.Bytes(), &list); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range list.Data {
			ids = append(ids, m.ID)
		}
		if strings.Join(ids, ",") != strings.Join(tt.listed, ",") {
			t.Errorf("%s: listed %v, want %v", tt.name, ids, tt.listed)
		}
		for _, id := range tt.listed {
			if w := do(s, "GET", "/v1/models/"+id, ""); w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"`+id+`"`) {
				t.Errorf("%s: retrieve %s: %d %s", tt.name, id, w.Code, w.Body)
			}
		}
		if w := do(s, "GET", "/v1/models/"+tt.missing, ""); w.Code != 404 || !strings.Contains(w.Body.String(), `"code":"model_not_found"`) {
			t.Errorf("%s: retrieve %s: %d %s", tt.name, tt.missing, w.Code, w.Body)
		}
	}
}
