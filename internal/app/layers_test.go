package app_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/makerfleet/makerfleet/"

// roles are the packages only the top layer may import, with their
// subpackages.
var roles = []string{"coordinator", "voter", "judge"}

// TestNothingBelowImportsARole parses every non-test Go file under
// internal/ outside internal/app and fails on an import of a role. Test
// files are left out: an external test of a low package may run a fleet.
func TestNothingBelowImportsARole(t *testing.T) {
	t.Parallel()
	internal, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(internal, "app")
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(internal, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == app || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(filepath.Dir(internal), path)
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if role := roleOf(imp); role != "" {
				t.Errorf("%s imports %s: only internal/app may import the role %s", filepath.ToSlash(rel), imp, role)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no Go files under %s", internal)
	}
}

// roleOf returns the role an import path belongs to, or "".
func roleOf(imp string) string {
	rest, ok := strings.CutPrefix(imp, module)
	if !ok {
		return ""
	}
	for _, r := range roles {
		if rest == r || strings.HasPrefix(rest, r+"/") {
			return r
		}
	}
	return ""
}

func TestRoleOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ imp, want string }{
		{module + "coordinator", "coordinator"},
		{module + "voter", "voter"},
		{module + "judge/judgeclient", "judge"},
		{module + "judgeclient", ""},
		{module + "internal/judgeclient", ""},
		{module + "coordinators", ""},
		{module + "schemas", ""},
		{"example.com/coordinator", ""},
	} {
		if got := roleOf(tc.imp); got != tc.want {
			t.Errorf("roleOf(%q) = %q, want %q", tc.imp, got, tc.want)
		}
	}
}

// TestCoreImportsOnlyCore: the core (internal/core/...) is pure: its
// non-test files import only the standard library, the core itself, the
// wire types and the task interface, never an adapter, a transport or a
// third-party module.
func TestCoreImportsOnlyCore(t *testing.T) {
	t.Parallel()
	core, err := filepath.Abs("../core")
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(imp string) bool {
		first, _, _ := strings.Cut(imp, "/")
		if !strings.Contains(first, ".") {
			return true // the standard library
		}
		rest, ok := strings.CutPrefix(imp, module)
		return ok && (strings.HasPrefix(rest, "internal/core/") || rest == "schemas" || rest == "task")
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(core, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if !allowed(imp) {
				t.Errorf("%s imports %s: the core imports only the standard library, internal/core, schemas and task", filepath.Base(path), imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no Go files under %s", core)
	}
}
