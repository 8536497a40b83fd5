package lru_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/makerfleet/makerfleet/internal/lru"
)

func TestCache(t *testing.T) {
	type op struct {
		put  bool
		key  string
		val  int
		want int // for a get: the value, or -1 for a miss
	}
	cases := []struct {
		name string
		size int
		ops  []op
	}{
		{"miss on empty", 2, []op{{key: "a", want: -1}}},
		{"put then get", 2, []op{{put: true, key: "a", val: 1}, {key: "a", want: 1}}},
		{"overwrite", 2, []op{{put: true, key: "a", val: 1}, {put: true, key: "a", val: 2}, {key: "a", want: 2}}},
		{"evicts the least recently put", 2, []op{
			{put: true, key: "a", val: 1}, {put: true, key: "b", val: 2}, {put: true, key: "c", val: 3},
			{key: "a", want: -1}, {key: "b", want: 2}, {key: "c", want: 3}}},
		{"a get keeps an entry", 2, []op{
			{put: true, key: "a", val: 1}, {put: true, key: "b", val: 2}, {key: "a", want: 1},
			{put: true, key: "c", val: 3}, {key: "a", want: 1}, {key: "b", want: -1}}},
		{"an overwrite keeps an entry", 2, []op{
			{put: true, key: "a", val: 1}, {put: true, key: "b", val: 2}, {put: true, key: "a", val: 9},
			{put: true, key: "c", val: 3}, {key: "a", want: 9}, {key: "b", want: -1}}},
		{"size below one holds one", 0, []op{
			{put: true, key: "a", val: 1}, {put: true, key: "b", val: 2}, {key: "a", want: -1}, {key: "b", want: 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := lru.New[string, int](tc.size)
			for i, o := range tc.ops {
				if o.put {
					c.Put(o.key, o.val)
					continue
				}
				v, ok := c.Get(o.key)
				switch {
				case o.want < 0 && ok:
					t.Fatalf("op %d: Get(%q) = %d, want a miss", i, o.key, v)
				case o.want >= 0 && (!ok || v != o.want):
					t.Fatalf("op %d: Get(%q) = %d, %v, want %d", i, o.key, v, ok, o.want)
				}
			}
			if n := c.Len(); n > max(tc.size, 1) {
				t.Fatalf("Len %d over size %d", n, tc.size)
			}
		})
	}
}

// TestCacheConcurrent: many writers never take it past its size (run with
// -race).
func TestCacheConcurrent(t *testing.T) {
	c := lru.New[string, int](16)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				k := fmt.Sprint(g, "-", i%40)
				c.Put(k, i)
				c.Get(k)
			}
		})
	}
	wg.Wait()
	if c.Len() != 16 {
		t.Fatalf("Len %d, want 16", c.Len())
	}
}

// TestDoOneFill: callers asking for a key while it is being made wait for
// that one fill, and later callers find it kept.
func TestDoOneFill(t *testing.T) {
	c := lru.New[string, int](4)
	var fills atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{})
	fill := func() (int, bool) {
		if fills.Add(1) == 1 {
			close(started)
		}
		<-release
		return 42, true
	}
	var wg sync.WaitGroup
	got := make([]int, 8)
	wg.Go(func() { got[0] = c.Do("k", fill) })
	<-started // the first fill is under way; the rest must wait for it
	for i := 1; i < len(got); i++ {
		wg.Go(func() { got[i] = c.Do("k", fill) })
	}
	close(release)
	wg.Wait()
	if n := fills.Load(); n != 1 {
		t.Fatalf("%d fills, want 1", n)
	}
	for i, v := range got {
		if v != 42 {
			t.Fatalf("caller %d got %d", i, v)
		}
	}
	if v, ok := c.Get("k"); !ok || v != 42 {
		t.Fatalf("Get after Do = %d, %v", v, ok)
	}
	if v := c.Do("k", func() (int, bool) { t.Fatal("filled a kept key"); return 0, false }); v != 42 {
		t.Fatalf("Do on a kept key = %d", v)
	}
}

// TestDoNotKept: a value fill says not to keep is returned, not cached.
func TestDoNotKept(t *testing.T) {
	c := lru.New[string, int](4)
	if v := c.Do("k", func() (int, bool) { return 7, false }); v != 7 {
		t.Fatalf("Do = %d, want 7", v)
	}
	if _, ok := c.Get("k"); ok {
		t.Fatal("a value fill said not to keep was kept")
	}
	if v := c.Do("k", func() (int, bool) { return 8, true }); v != 8 {
		t.Fatalf("second Do = %d, want a fresh fill's 8", v)
	}
}

// TestDoPanic: a fill that panics panics its caller; the key is free for
// the next caller, nothing hangs.
func TestDoPanic(t *testing.T) {
	c := lru.New[string, int](4)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		c.Do("k", func() (int, bool) { panic("boom") })
	}()
	if v := c.Do("k", func() (int, bool) { return 3, true }); v != 3 {
		t.Fatalf("Do after a panic = %d, want 3", v)
	}
}
