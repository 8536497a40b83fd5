package deploy_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	"go.yaml.in/yaml/v4"
)

// promRef is what one PromQL expression names.
type promRef struct {
	metrics  []string            // as written: maker_step_rounds_bucket
	matchers map[string][]string // metric ("" for a bare {…}) → label names matched
	grouping []string            // labels of by/without/on/ignoring/group_*
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promSelector = regexp.MustCompile(`([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promToken    = regexp.MustCompile(`[0-9][\w.]*|[a-zA-Z_:][\w:]*`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
		"group_left", "group_right", "inf", "nan", "Inf", "NaN", "start", "end"}
)

// parsePromQL finds the metric names, label matchers and grouping labels
// of expr: good enough for the expressions here, not a PromQL parser.
// Grafana's $__rate_interval and friends are ranges, $var sits in strings.
func parsePromQL(expr string) promRef {
	r := promRef{matchers: map[string][]string{}}
	s := promString.ReplaceAllString(expr, `""`)
	s = promRange.ReplaceAllString(s, " ")
	for _, m := range promSelector.FindAllStringSubmatch(s, -1) {
		for _, lm := range promMatcher.FindAllStringSubmatch(m[2], -1) {
			r.matchers[m[1]] = append(r.matchers[m[1]], lm[1])
		}
		if m[1] != "" {
			r.metrics = append(r.metrics, m[1])
		}
	}
	s = promSelector.ReplaceAllString(s, " ")
	for _, m := range promGrouping.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				r.grouping = append(r.grouping, l)
			}
		}
	}
	s = promGrouping.ReplaceAllString(s, " ")
	for _, loc := range promToken.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		if tok[0] >= '0' && tok[0] <= '9' || slices.Contains(promKeywords, tok) || strings.HasPrefix(rest, "(") {
			continue // a number, a keyword, a function or an aggregation
		}
		r.metrics = append(r.metrics, tok)
	}
	return r
}

// resolve maps a name as written to its contract metric: a histogram's
// _bucket, _sum and _count series are the histogram's.
func resolve(name string) (string, metricDef, bool) {
	if d, ok := contract[name]; ok {
		return name, d, d.kind != "histogram" // a histogram is queried by its series
	}
	if d, ok := externals[name]; ok {
		return name, d, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if d, found := contract[base]; ok && found && d.kind == "histogram" {
			if suffix == "_bucket" {
				d.labels = append(slices.Clone(d.labels), "le")
			}
			return base, d, true
		}
	}
	return name, metricDef{}, false
}

// checkPromQL: expr names only contract metrics (or externals), at least
// one, matches only labels those metrics have, and groups by labels one
// of them has. It returns the contract metrics named.
func checkPromQL(t *testing.T, where, expr string) []string {
	t.Helper()
	if strings.TrimSpace(expr) == "" {
		t.Errorf("%s: empty expression", where)
		return nil
	}
	if !balanced(promString.ReplaceAllString(expr, `""`)) {
		t.Errorf("%s: unbalanced brackets in %q", where, expr)
	}
	r := parsePromQL(expr)
	if len(r.metrics) == 0 {
		t.Errorf("%s: %q names no metric", where, expr)
	}
	var used []string
	labels := slices.Clone(targetLabels)
	for _, m := range r.metrics {
		base, d, ok := resolve(m)
		if !ok {
			t.Errorf("%s: %s is no metric of the contract (%q)", where, m, expr)
			continue
		}
		if d.kind == "counter" && !regexp.MustCompile(`\b(?:rate|increase|irate|resets)\s*\(\s*`+regexp.QuoteMeta(m)+`\b`).MatchString(expr) {
			t.Errorf("%s: counter %s used without rate() or increase()", where, m)
		}
		used = append(used, base)
		labels = append(labels, d.labels...)
		for _, l := range r.matchers[m] {
			if !slices.Contains(d.labels, l) && !slices.Contains(targetLabels, l) {
				t.Errorf("%s: %s has no label %q", where, m, l)
			}
		}
	}
	if len(r.matchers[""]) > 0 {
		t.Errorf("%s: a selector without a metric name (%q)", where, expr)
	}
	for _, l := range r.grouping {
		if !slices.Contains(labels, l) {
			t.Errorf("%s: groups by %q, which none of %v has", where, l, r.metrics)
		}
	}
	return used
}

// balanced says whether s's (), {} and [] nest.
func balanced(s string) bool {
	var stack []rune
	pair := map[rune]rune{')': '(', '}': '{', ']': '['}
	for _, c := range s {
		switch c {
		case '(', '{', '[':
			stack = append(stack, c)
		case ')', '}', ']':
			if len(stack) == 0 || stack[len(stack)-1] != pair[c] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0
}

// The extractor must see what matters, or the checks prove nothing.
func TestParsePromQL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr              string
		metrics, grouping []string
		matchers          map[string][]string
	}{
		{`sum by (le, model) (rate(maker_model_latency_seconds_bucket{model=~"$model"}[$__rate_interval]))`,
			[]string{"maker_model_latency_seconds_bucket"}, []string{"le", "model"}, map[string][]string{"maker_model_latency_seconds_bucket": {"model"}}},
		{`(sum(rate(maker_decisions_total[10m])) or vector(0)) == 0 and sum(maker_jobs_running) > 0`,
			[]string{"maker_decisions_total", "maker_jobs_running"}, nil, map[string][]string{}},
		{`up{job=~"a,b{c}"} == 0 unless on (instance) maker_build_info offset 5m > 1e-9`,
			[]string{"up", "maker_build_info"}, []string{"instance"}, map[string][]string{"up": {"job"}}},
		{`sum(rate(x_total[5m])) / scalar(sum(rate(y_total{code="5.."}[5m])))`,
			[]string{"x_total", "y_total"}, nil, map[string][]string{"y_total": {"code"}}},
	} {
		r := parsePromQL(tc.expr)
		slices.Sort(r.metrics)
		slices.Sort(tc.metrics)
		if !slices.Equal(r.metrics, tc.metrics) || !slices.Equal(r.grouping, tc.grouping) ||
			!maps.EqualFunc(r.matchers, tc.matchers, slices.Equal) {
			t.Errorf("parsePromQL(%q) = %+v, want metrics %v grouping %v matchers %v", tc.expr, r, tc.metrics, tc.grouping, tc.matchers)
		}
	}
}

// ---- Grafana ------------------------------------------------------------

type grafanaTarget struct {
	RefID      string `json:"refId"`
	Expr       string `json:"expr"`
	Datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
}

type grafanaPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []grafanaTarget          `json:"targets"`
	Panels  []grafanaPanel           `json:"panels"`
}

type grafanaDashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Query      any    `json:"query"`
			Datasource *struct {
				Type string `json:"type"`
				UID  string `json:"uid"`
			} `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

// dsVar is the dashboard's datasource variable: a Prometheus picked on
// import or in the dashboard, never a datasource uid of one Grafana.
const dsVar = "${DS_PROMETHEUS}"

// TestGrafanaDashboard: grafana/makerfleet.json is a Grafana dashboard
// (schemaVersion 39 or later) whose every panel and query uses the
// datasource variable, whose every expression names only contract metrics,
// and which shows every metric of the contract.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("grafana/makerfleet.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/makerfleet.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.UID) > 40 {
		t.Errorf("title %q, uid %q: want both, uid at most 40 characters", d.Title, d.UID)
	}
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want 39 or later", d.SchemaVersion)
	}
	used := map[string]bool{}
	hasDS := false
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			hasDS = hasDS || ("${"+v.Name+"}" == dsVar && v.Query == "prometheus")
		case "query":
			if v.Datasource == nil || v.Datasource.UID != dsVar {
				t.Errorf("variable %s: datasource %v, want %s", v.Name, v.Datasource, dsVar)
			}
			q, _ := v.Query.(map[string]any)
			expr, _ := q["query"].(string)
			m := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`).FindStringSubmatch(expr)
			if m == nil {
				t.Errorf("variable %s: query %q, want label_values(metric, label)", v.Name, expr)
				continue
			}
			if d, ok := contract[m[1]]; !ok || !slices.Contains(d.labels, m[2]) {
				t.Errorf("variable %s: %s{%s} is not in the contract", v.Name, m[1], m[2])
			}
		}
	}
	if !hasDS {
		t.Errorf("no datasource variable %s of type prometheus", dsVar)
	}

	ids := map[int]bool{}
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("%s: id missing or not unique", where)
			}
			ids[p.ID] = true
			if p.Title == "" {
				t.Errorf("%s: no title", where)
			}
			if g := p.GridPos; g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("%s: gridPos %+v outside the 24 columns", where, g)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != dsVar || p.Datasource.Type != "prometheus" {
				t.Errorf("%s: datasource %v, want prometheus %s", where, p.Datasource, dsVar)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no queries", where)
			}
			refs := map[string]bool{}
			for _, q := range p.Targets {
				if q.RefID == "" || refs[q.RefID] {
					t.Errorf("%s: refId %q missing or not unique", where, q.RefID)
				}
				refs[q.RefID] = true
				if q.Datasource.UID != dsVar {
					t.Errorf("%s %s: datasource %q, want %s", where, q.RefID, q.Datasource.UID, dsVar)
				}
				for _, m := range checkPromQL(t, where+" "+q.RefID, q.Expr) {
					used[m] = true
				}
			}
		}
	}
	walk(d.Panels)
	for _, m := range slices.Sorted(maps.Keys(contract)) {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}

// ---- alerting rules -----------------------------------------------------

type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// wantAlerts are the alerts docs/operations.md promises, by name.
var wantAlerts = []string{
	"MakerSamplesLagGrowing", "MakerRedFlagRateHigh", "MakerNoDecisions",
	"MakerModelServerErrors", "MakerModelRateLimited", "MakerAPIServerErrors",
	"MakerJudgeRefusals", "MakerNotReady", "MakerForgedResults", "MakerOverclaimedResults",
	"MakerProviderUnavailable",
}

// TestAlertRules: prometheus/alerts.yml is a Prometheus rule file (known
// keys only, durations Prometheus reads, annotations that are valid
// templates), every expression names only contract metrics, and the
// alerts the docs promise are there.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	f, err := os.Open("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var rf ruleFile
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("prometheus/alerts.yml: %v", err)
	}
	// Prometheus's template functions, as far as these rules use them; it
	// runs each annotation with $labels and $value defined first.
	funcs := template.FuncMap{}
	for _, name := range []string{"humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp", "printf", "title", "toUpper", "toLower", "reReplaceAll", "query", "first", "value", "label"} {
		funcs[name] = func(...any) string { return "" }
	}
	const prelude = `{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}`
	groups, alerts := map[string]bool{}, map[string]bool{}
	if len(rf.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	for _, g := range rf.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group %q: name missing or not unique", g.Name)
		}
		groups[g.Name] = true
		if len(g.Rules) == 0 {
			t.Errorf("group %s: no rules", g.Name)
		}
		for i, r := range g.Rules {
			where := fmt.Sprintf("group %s rule %d %s", g.Name, i, r.Alert)
			if (r.Alert == "") == (r.Record == "") {
				t.Errorf("%s: want one of alert and record", where)
			}
			if r.Record != "" {
				t.Errorf("%s: a recording rule; the dashboard queries the metrics themselves", where)
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("%s: defined twice", where)
			}
			alerts[r.Alert] = true
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if _, err := time.ParseDuration(d); d != "" && err != nil {
					t.Errorf("%s: duration %q: %v", where, d, err)
				}
			}
			if s := r.Labels["severity"]; !slices.Contains([]string{"info", "warning", "critical"}, s) {
				t.Errorf("%s: severity %q, want info, warning or critical", where, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary annotation", where)
			}
			for k, a := range r.Annotations {
				if _, err := template.New(k).Funcs(funcs).Parse(prelude + a); err != nil {
					t.Errorf("%s: annotation %s: %v", where, k, err)
				}
			}
			checkPromQL(t, where, r.Expr)
		}
	}
	for _, a := range wantAlerts {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}
}
