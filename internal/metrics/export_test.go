package metrics

import "time"

// ExpireLag makes q's next collect read the consumers again.
func ExpireLag(q *QueueLag) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.readAt = time.Time{}
}
