package cli

import "testing"

func TestParseTried(t *testing.T) {
	t.Parallel()
	got, err := parseTried([]string{"local_model=qwen: no", "tools=a=b"})
	if err != nil || got["local_model"] != "qwen: no" || got["tools"] != "a=b" {
		t.Errorf("parseTried = %v, %v", got, err)
	}
	for _, bad := range []string{"local_model", "local_model=", "gut=feeling", "=x"} {
		if _, err := parseTried([]string{bad}); err == nil {
			t.Errorf("parseTried(%q) accepted", bad)
		}
	}
}
