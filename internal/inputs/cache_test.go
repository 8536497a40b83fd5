package inputs

import "testing"

// TestCacheBytes: the cache holds at most its bytes, dropping the least
// recently used first, and never keeps an input larger than all of it.
func TestCacheBytes(t *testing.T) {
	t.Parallel()
	c := newCache(10)
	c.put("a", make([]byte, 4))
	c.put("b", make([]byte, 4))
	if _, ok := c.get("a"); !ok { // a is now the most recently used
		t.Fatal("a dropped early")
	}
	c.put("c", make([]byte, 4)) // over 10: b goes
	if _, ok := c.get("b"); ok {
		t.Error("b kept past the budget")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s dropped", k)
		}
	}
	c.put("huge", make([]byte, 11))
	if _, ok := c.get("huge"); ok || c.used != 8 {
		t.Errorf("an input over the budget was kept (used %d)", c.used)
	}
	if c0 := newCache(0); true {
		c0.put("x", []byte("1"))
		if _, ok := c0.get("x"); ok {
			t.Error("a zero budget keeps something")
		}
	}
}
