package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Consumer names a JetStream durable consumer whose lag is reported.
type Consumer struct{ Stream, Name string }

// lagTTL is how long a read of the consumers' info serves scrapes.
const lagTTL = time.Second

// lagTimeout bounds one read of a consumer's info at scrape time.
const lagTimeout = 2 * time.Second

var (
	pendingDesc = prometheus.NewDesc("maker_queue_pending_messages",
		"Messages of the stream the consumer has not delivered yet (its lag).", []string{"stream", "consumer"}, nil)
	ackPendingDesc = prometheus.NewDesc("maker_queue_ack_pending_messages",
		"Messages delivered to the consumer and not acknowledged yet (in hand).", []string{"stream", "consumer"}, nil)
)

// QueueLag reports consumers' lag, read from JetStream consumer info at
// scrape time (a read serves the scrapes of the next second). A consumer
// that cannot be read (not created yet, server away) is left out of that
// scrape.
type QueueLag struct {
	js        jetstream.JetStream
	consumers []Consumer
	now       func() time.Time

	mu     sync.Mutex
	readAt time.Time
	last   []prometheus.Metric
}

var _ prometheus.Collector = (*QueueLag)(nil)

// NewQueueLag returns the collector of consumers' lag; register it with
// Registry.QueueLag or on a prometheus.Registerer.
func NewQueueLag(js jetstream.JetStream, consumers ...Consumer) *QueueLag {
	return &QueueLag{js: js, consumers: consumers, now: time.Now}
}

// QueueLag registers the lag collector of consumers on r.
func (r *Registry) QueueLag(js jetstream.JetStream, consumers ...Consumer) *QueueLag {
	q := NewQueueLag(js, consumers...)
	r.register(q)
	return q
}

// Describe implements prometheus.Collector.
func (q *QueueLag) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- ackPendingDesc
}

// Collect implements prometheus.Collector.
func (q *QueueLag) Collect(ch chan<- prometheus.Metric) {
	for _, m := range q.read() {
		ch <- m
	}
}

// read returns the metrics of the last read, reading again when it is
// older than lagTTL. Concurrent scrapes wait for one read.
func (q *QueueLag) read() []prometheus.Metric {
	q.mu.Lock()
	defer q.mu.Unlock()
	if now := q.now(); q.last != nil && now.Sub(q.readAt) < lagTTL {
		return q.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	out := make([]prometheus.Metric, 0, 2*len(q.consumers))
	for _, c := range q.consumers {
		cons, err := q.js.Consumer(ctx, c.Stream, c.Name)
		if err != nil {
			continue
		}
		info, err := cons.Info(ctx)
		if err != nil {
			continue
		}
		out = append(out,
			prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(info.NumPending), c.Stream, c.Name),
			prometheus.MustNewConstMetric(ackPendingDesc, prometheus.GaugeValue, float64(info.NumAckPending), c.Stream, c.Name))
	}
	q.last, q.readAt = out, q.now()
	return out
}
