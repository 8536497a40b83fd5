package judgeclient_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/makerfleet/makerfleet"

// The coordinator asks the judges through this package alone: it must not
// depend on the judge role (settings, secrets, panels, model clients),
// nor this package on it.
func TestCoordinatorDoesNotDependOnJudge(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to read the build graph: %v", err)
	}
	for _, tc := range []struct {
		pkg       string
		mustUse   string
		forbidden string
	}{
		{module + "/coordinator", module + "/internal/judgeclient", module + "/judge"},
		{module + "/internal/judgeclient", module + "/schemas", module + "/judge"},
	} {
		out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", tc.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.pkg, err)
		}
		deps := strings.Fields(string(out))
		found := false
		for _, d := range deps {
			if d == tc.forbidden {
				t.Errorf("%s depends on %s; it may use %s only", tc.pkg, tc.forbidden, module+"/internal/judgeclient")
			}
			found = found || d == tc.mustUse
		}
		if !found {
			t.Errorf("%s does not depend on %s: is this test still reading the right graph? deps: %v", tc.pkg, tc.mustUse, deps)
		}
	}
}
