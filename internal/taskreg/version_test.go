package taskreg

import "testing"

// TestCompareVersions: semantic order, not text order or registration
// order.
func TestCompareVersions(t *testing.T) {
	t.Parallel()
	ordered := []string{"0.9", "1.0.0-alpha", "1.0.0-alpha.2", "1.0.0-beta", "1.0.0", "1.0.1", "1.2", "1.9.0", "1.10.0", "2", "2.0.1-rc1", "2.0.1", "10.0.0"}
	for i, a := range ordered {
		for j, b := range ordered {
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			if got := CompareVersions(a, b); got != want {
				t.Errorf("CompareVersions(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
	if CompareVersions("1.0", "1.0.0") != 0 {
		t.Error("a missing part is not 0")
	}
}
