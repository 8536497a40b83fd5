package inputs

import (
	"container/list"
	"sync"
)

// cache keeps recently read inputs up to a total of bytes, dropping the
// least recently used first. An input larger than the whole budget is not
// kept.
type cache struct {
	mu    sync.Mutex
	limit int64
	used  int64
	items map[string]*list.Element
	order list.List // front: most recently used
}

type cached struct {
	ref  string
	data []byte
}

func newCache(limit int64) *cache {
	return &cache{limit: limit, items: map[string]*list.Element{}}
}

func (c *cache) get(ref string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[ref]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cached).data, true
}

func (c *cache) put(ref string, data []byte) {
	size := int64(len(data))
	if size > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[ref]; ok {
		c.order.MoveToFront(e)
		return
	}
	for c.used+size > c.limit {
		last := c.order.Back()
		old := last.Value.(*cached)
		c.order.Remove(last)
		delete(c.items, old.ref)
		c.used -= int64(len(old.data))
	}
	c.items[ref] = c.order.PushFront(&cached{ref: ref, data: data})
	c.used += size
}
