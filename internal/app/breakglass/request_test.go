package breakglass

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Build reads under the root, takes AGENTS.md as the constraints,
// lists withheld files, and marks requests made inside a panel.
func TestBuildRequest(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{"AGENTS.md": "No Float in compute paths.", "a.go": "package a", ".env": "X=1", "build.log": "FAIL"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	in := Input{Problem: "break glass: x", Files: []string{"a.go", ".env"}, LogPath: "build.log", Root: root,
		Tried: map[string]string{"local_model": "n", "frontier_model": "n", "tools": "n"}, Session: "s", Tenant: "acme"}
	req, warnings, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if req.Constraints != "No Float in compute paths." || req.BuildLog != "FAIL" || len(req.Files) != 1 || len(req.PriorAttempts) != 3 ||
		req.ParentRequestID != "" || !strings.HasPrefix(req.RequestID, "bg-") {
		t.Errorf("request %+v", req)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "withheld .env") || len(req.ExcludedFiles) != 1 {
		t.Errorf("warnings %v", warnings)
	}
	in.Parent = "bg-parent-1"
	if req, _, err = Build(in); err != nil || req.ParentRequestID != "bg-parent-1" {
		t.Errorf("inside a panel: %+v, %v", req, err)
	}
	for _, bad := range []Input{
		{Problem: "break glass: x", ProblemType: "poetry", Session: "s", Tenant: "acme", Root: root},
		{Problem: "break glass: x", BudgetUSD: -1, Session: "s", Tenant: "acme", Root: root},
		{Problem: "break glass: x", LogPath: ".env", Session: "s", Tenant: "acme", Root: root},
		{Problem: "break glass: x", Session: "no spaces", Tenant: "acme", Root: root},
		{Problem: "break glass: x", Session: "s", Tenant: "acme", Root: filepath.Join(root, "missing")},
	} {
		if _, _, err := Build(bad); err == nil {
			t.Errorf("Build(%+v) accepted", bad)
		}
	}
}
