// Package lru is a fixed-size cache that drops its least recently used
// entry when full, safe for concurrent use.
//
// The fleet keeps a few of these where a long-running process would
// otherwise remember without bound what it has seen (a voter's bound task
// instances, a spec instance's decoded states): a message that names a new
// task or params, forged or not, costs at most one entry.
package lru

import (
	"container/list"
	"sync"
)

// Cache maps keys to values, holding at most its size of them.
type Cache[K comparable, V any] struct {
	mu    sync.Mutex
	size  int
	items map[K]*list.Element
	order list.List // front: most recently used
	loads map[K]*load[V]
}

// load is a value being made by Do, which other callers wait for.
type load[V any] struct {
	done chan struct{}
	val  V
}

type entry[K comparable, V any] struct {
	key K
	val V
}

// New returns an empty cache for size entries (at least one).
func New[K comparable, V any](size int) *Cache[K, V] {
	size = max(size, 1)
	return &Cache[K, V]{size: size, items: make(map[K]*list.Element, size), loads: map[K]*load[V]{}}
}

// Get returns the value for key and marks it used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*entry[K, V]).val, true
}

// Put sets the value for key, dropping the least recently used entry when
// the cache is full.
func (c *Cache[K, V]) Put(key K, val V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put(key, val)
}

func (c *Cache[K, V]) put(key K, val V) {
	if e, ok := c.items[key]; ok {
		e.Value.(*entry[K, V]).val = val
		c.order.MoveToFront(e)
		return
	}
	if c.order.Len() >= c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*entry[K, V]).key)
	}
	c.items[key] = c.order.PushFront(&entry[K, V]{key, val})
}

// Do returns the value for key, calling fill for it when the cache has
// none. Callers that ask for a key while it is being made wait for that one
// call rather than make it again (a step's samples arrive together). When
// fill says keep is false the value is returned, to the waiters too, but
// not kept.
func (c *Cache[K, V]) Do(key K, fill func() (val V, keep bool)) V {
	c.mu.Lock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		c.mu.Unlock()
		return e.Value.(*entry[K, V]).val
	}
	if l, ok := c.loads[key]; ok {
		c.mu.Unlock()
		<-l.done
		return l.val
	}
	l := &load[V]{done: make(chan struct{})}
	c.loads[key] = l
	c.mu.Unlock()

	kept := false
	defer func() {
		// Also when fill panics: waiters get the zero value, not a hang.
		c.mu.Lock()
		delete(c.loads, key)
		if kept {
			c.put(key, l.val)
		}
		c.mu.Unlock()
		close(l.done)
	}()
	l.val, kept = fill()
	return l.val
}

// Len is the number of entries.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
