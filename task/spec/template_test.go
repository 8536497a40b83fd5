package spec

import "testing"

// TestStateFree: a template is written once per instance only when
// nothing in it can read the state; anything that might is rendered
// every time.
func TestStateFree(t *testing.T) {
	cases := []struct {
		src  string
		free bool
	}{
		{`plain text`, true},
		{`{{.params.n}} disks, {{if eq (mod .params.n 2) 0}}even{{else}}odd{{end}}`, true},
		{`{{range .params.list}}{{plain .x}}{{end}}`, true}, // .x of an item of params.list
		{`{{with .params}}{{.n}}{{end}}`, true},
		{`{{$p := .params}}{{$p.n}}`, true},
		{`{{.state.pegs}}`, false},
		{`{{plain $.state}}`, false},
		{`{{get . "state"}}`, false},
		{`{{$x := .}}{{$x.params}}`, false},
		{`{{plain $}}`, false},
		{`{{with .params}}{{.state}}{{end}}`, false}, // params.state: counted anyway
		{`{{define "sub"}}{{.n}}{{end}}{{template "sub" .params}}`, false},
		{`{{/* .state */}}{{.params.n}}`, true},
	}
	for _, tc := range cases {
		tp, errs := compileTemplate(&doc{}, "t", tc.src)
		if errs != nil {
			t.Fatalf("%s: %v", tc.src, errs)
		}
		if tp.stateFree != tc.free {
			t.Errorf("%s: stateFree %v, want %v", tc.src, tp.stateFree, tc.free)
		}
	}
}
