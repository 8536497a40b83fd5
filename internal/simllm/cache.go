package simllm

import "sync"

// Prompt caching, as OpenAI bills it: a call whose prompt repeats a
// prefix of at least CacheMinTokens tokens that an earlier call sent has
// that prefix served from the cache, counted in 128-token blocks, and
// says so in usage.prompt_tokens_details.cached_tokens. The prefix the
// simulated model caches is every message but the last (a task's
// unchanging instructions, put first, before the step's own).
const (
	CacheMinTokens   = 1024
	cacheBlockTokens = 128
	// maxCachedPrefixes bounds the prefixes remembered; past it the cache
	// starts empty again (a provider evicts too).
	maxCachedPrefixes = 4096
)

// promptCache remembers the prefixes sent. Safe for concurrent use; the
// zero value is ready.
type promptCache struct {
	mu   sync.Mutex
	seen map[uint64]struct{}
}

// served is how many of a call's prompt tokens the cache serves: the
// prefix's, in whole blocks, when it was sent before and is long enough;
// else none, and the prefix is remembered.
func (c *promptCache) served(prefix uint64, tokens int) int {
	if tokens < CacheMinTokens {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[prefix]; ok {
		return tokens / cacheBlockTokens * cacheBlockTokens
	}
	if c.seen == nil || len(c.seen) >= maxCachedPrefixes {
		c.seen = make(map[uint64]struct{})
	}
	c.seen[prefix] = struct{}{}
	return 0
}
