package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry is one role's metrics: the Go and process collectors, the
// role's build info and whatever handles are made on it.
type Registry struct {
	reg  *prometheus.Registry
	role string
}

// NewRegistry returns a registry for role ("coordinator", "voter", "judge",
// "serve", ...) built at version, with maker_build_info{role,version} 1
// and the Go and process collectors.
func NewRegistry(role, version string) *Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "maker_build_info", Help: "Always 1: the role and version of this process.",
	}, []string{"role", "version"})
	info.WithLabelValues(role, version).Set(1)
	reg.MustRegister(info)
	return &Registry{reg: reg, role: role}
}

// Role is the role the registry was made for.
func (r *Registry) Role() string { return r.role }

// Prometheus returns the underlying registry (to register more
// collectors, or to gather in tests).
func (r *Registry) Prometheus() *prometheus.Registry { return r.reg }

// Handler serves the registry in the Prometheus text format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{})
}

// register registers cs, panicking on a clash: a clash is a programming
// error (the same handle made twice on one registry).
func (r *Registry) register(cs ...prometheus.Collector) { r.reg.MustRegister(cs...) }

// Histogram buckets.
var (
	// countBuckets suit rounds and samples per step: k is small, a hard
	// step may draw a hundred samples or more.
	countBuckets = []float64{1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 30, 50, 100, 200}
	// marginBuckets suit the lead at a decision (k, mostly 1 to 10).
	marginBuckets = []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20}
	// latencyBuckets suit model calls, from a fast local model to a slow
	// frontier one.
	latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120}
	// httpBuckets suit API requests.
	httpBuckets = prometheus.DefBuckets
)
