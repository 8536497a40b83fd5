package deploy_test

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/makerfleet/makerfleet/internal/metrics"
)

// metricDef is one metric of the fleet's contract (docs/operations.md):
// its type and labels.
type metricDef struct {
	kind   string // counter, gauge, histogram
	labels []string
}

// contract lists every metric the roles export at --metrics-addr, as
// internal/metrics defines them. The dashboard and the alerts may name
// only these (and externals).
var contract = map[string]metricDef{
	"maker_build_info":                    {"gauge", []string{"role", "version"}},
	"maker_samples_requested_total":       {"counter", []string{"tenant"}},
	"maker_votes_total":                   {"counter", []string{"tenant"}},
	"maker_samples_red_flagged_total":     {"counter", []string{"tenant", "reason"}},
	"maker_decisions_total":               {"counter", []string{"tenant", "rung"}},
	"maker_step_rounds":                   {"histogram", []string{"tenant"}},
	"maker_step_samples":                  {"histogram", []string{"tenant"}},
	"maker_step_margin":                   {"histogram", []string{"tenant"}},
	"maker_escalations_total":             {"counter", []string{"tenant", "rung"}},
	"maker_lease_takeovers_total":         {"counter", nil},
	"maker_jobs_running":                  {"gauge", nil},
	"maker_jobs_waiting":                  {"gauge", []string{"reason"}},
	"maker_jobs_finished_total":           {"counter", []string{"tenant", "state"}},
	"maker_tokens_total":                  {"counter", []string{"tenant", "model", "kind"}},
	"maker_cost_usd_total":                {"counter", []string{"tenant", "model"}},
	"maker_forged_results_total":          {"counter", []string{"tenant"}},
	"maker_overclaimed_results_total":     {"counter", []string{"tenant"}},
	"maker_records_refused_total":         {"counter", []string{"tenant", "reason"}},
	"maker_samples_answered_total":        {"counter", []string{"model"}},
	"maker_voter_red_flagged_total":       {"counter", []string{"model", "reason"}},
	"maker_model_latency_seconds":         {"histogram", []string{"model"}},
	"maker_model_errors_total":            {"counter", []string{"model", "code"}},
	"maker_voter_in_flight":               {"gauge", nil},
	"maker_queue_pending_messages":        {"gauge", []string{"stream", "consumer"}},
	"maker_queue_ack_pending_messages":    {"gauge", []string{"stream", "consumer"}},
	"maker_judge_calls_total":             {"counter", []string{"kind", "outcome"}},
	"maker_judge_refusals_total":          {"counter", []string{"reason"}},
	"maker_judge_cost_usd_total":          {"counter", []string{"tenant"}},
	"maker_http_requests_total":           {"counter", []string{"route", "code"}},
	"maker_http_request_duration_seconds": {"histogram", []string{"route"}},
}

// externals are the few metrics from elsewhere an alert may use: the
// scrape's own up, and kube-state-metrics' readiness of a pod.
var externals = map[string]metricDef{
	"up":                    {"gauge", nil},
	"kube_pod_status_ready": {"gauge", []string{"namespace", "pod", "condition"}},
}

// targetLabels are added by the scrape (deploy/prometheus/prometheus.yml).
var targetLabels = []string{"instance", "job", "namespace", "pod", "app"}

// TestContractIsTheCode: the contract above is what internal/metrics
// registers, name for name and label for label, so the dashboard and the
// alerts chart what the roles export.
func TestContractIsTheCode(t *testing.T) {
	t.Parallel()
	r := metrics.NewRegistry("test", "dev")
	co := metrics.NewCoordinator(r)
	co.JobsRunning(func() int { return 0 })
	co.JobsWaiting([]string{"provider_unavailable"}, func(string) int { return 0 })
	metrics.NewVoter(r)
	metrics.NewJudge(r)
	metrics.NewHTTP(r)
	r.QueueLag(nil) // described only, never collected here
	ch := make(chan *prometheus.Desc)
	go func() {
		defer close(ch)
		r.Prometheus().Describe(ch)
	}()
	desc := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	code := map[string][]string{}
	for d := range ch {
		m := desc.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		if !strings.HasPrefix(m[1], "maker_") {
			continue // the Go and process collectors
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		code[m[1]] = labels
	}
	for _, name := range slices.Sorted(maps.Keys(code)) {
		d, ok := contract[name]
		if !ok {
			t.Errorf("internal/metrics registers %s%v; add it to the contract (and chart it)", name, code[name])
			continue
		}
		got, want := slices.Sorted(slices.Values(code[name])), slices.Sorted(slices.Values(d.labels))
		if !slices.Equal(got, want) {
			t.Errorf("%s: labels %v in internal/metrics, %v in the contract", name, got, want)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(contract)) {
		if _, ok := code[name]; !ok {
			t.Errorf("%s is in the contract, internal/metrics registers no such metric", name)
		}
	}
}
