package deploy_test

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName      string `yaml:"job_name"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Type  string   `yaml:"type"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
		KubernetesSDConfigs []struct {
			Role       string `yaml:"role"`
			Namespaces struct {
				Names []string `yaml:"names"`
			} `yaml:"namespaces"`
		} `yaml:"kubernetes_sd_configs"`
		RelabelConfigs []relabel `yaml:"relabel_configs"`
	} `yaml:"scrape_configs"`
}

type relabel struct {
	SourceLabels []string `yaml:"source_labels"`
	Action       string   `yaml:"action"`
	Regex        string   `yaml:"regex"`
}

// mounts maps a compose service's container paths to host paths.
func mounts(s composeService) map[string]string {
	m := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			m[parts[1]] = parts[0]
		}
	}
	return m
}

// TestMonitoringProfile: prometheus/prometheus.yml scrapes every compose
// role with metrics at its --metrics-addr port and the annotated pods of
// the namespace, loads alerts.yml, and names its jobs so MakerTargetDown
// sees them; compose's monitoring profile mounts it and Grafana's
// provisioning, which loads the dashboard from where it is mounted.
func TestMonitoringProfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var pc promConfig
	if err := yaml.Unmarshal(b, &pc); err != nil {
		t.Fatalf("prometheus/prometheus.yml: %v", err)
	}
	cf := loadCompose(t)
	prom, ok := cf.Services["prometheus"]
	if !ok {
		t.Fatal("compose: no service prometheus")
	}
	pm := mounts(prom)
	const confDir = "/etc/prometheus"
	if src := pm[confDir+"/prometheus.yml"]; filepath.Clean(src) != "prometheus/prometheus.yml" {
		t.Errorf("compose prometheus: %s/prometheus.yml is %q, want ./prometheus/prometheus.yml", confDir, src)
	}
	if len(pc.RuleFiles) == 0 {
		t.Errorf("prometheus.yml: no rule_files")
	}
	for _, f := range pc.RuleFiles {
		if _, err := os.Stat(filepath.Join("prometheus", f)); err != nil {
			t.Errorf("prometheus.yml: rule file %s: %v", f, err)
		}
		if src := pm[path.Join(confDir, f)]; filepath.Clean(src) != filepath.Join("prometheus", f) {
			t.Errorf("compose prometheus: rule file %s is not mounted from ./prometheus/%s", f, f)
		}
	}

	// The compose roles with metrics, and their port.
	want := map[string]int{}
	for name, s := range cf.Services {
		if !s.isMaker() || len(s.Profiles) > 0 {
			continue
		}
		if c, err := parseMaker(s.Command); err == nil && isMetricsRole(c.sub) {
			want[name] = metricsPort(t, "compose "+name, c, s.Environment)
		}
	}
	up := regexp.MustCompile(`^makerfleet.*$`) // MakerTargetDown's job matcher
	var compose, pods bool
	for _, sc := range pc.ScrapeConfigs {
		if !up.MatchString(sc.JobName) {
			t.Errorf("prometheus.yml: job %q escapes MakerTargetDown's up{job=~\"makerfleet.*\"}", sc.JobName)
		}
		for _, d := range sc.DNSSDConfigs {
			compose = true
			got := map[string]int{}
			for _, n := range d.Names {
				got[n] = d.Port
			}
			for name, port := range want {
				if got[name] != port {
					t.Errorf("prometheus.yml %s: scrapes %s on port %d, it serves metrics on %d", sc.JobName, name, got[name], port)
				}
			}
			for n := range got {
				if _, ok := want[n]; !ok {
					t.Errorf("prometheus.yml %s: %s is no compose role with metrics", sc.JobName, n)
				}
			}
		}
		for _, k := range sc.KubernetesSDConfigs {
			pods = k.Role == "pod" && slices.Contains(k.Namespaces.Names, namespace)
			keeps := slices.ContainsFunc(sc.RelabelConfigs, func(r relabel) bool {
				return r.Action == "keep" && slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_annotation_prometheus_io_scrape"})
			})
			if !keeps {
				t.Errorf("prometheus.yml %s: does not keep the pods annotated prometheus.io/scrape", sc.JobName)
			}
		}
	}
	if !compose || !pods {
		t.Errorf("prometheus.yml: compose roles scraped %v, namespace %s's pods %v", compose, namespace, pods)
	}

	// Grafana loads the dashboard from where compose mounts it.
	g, ok := cf.Services["grafana"]
	if !ok {
		t.Fatal("compose: no service grafana")
	}
	gm := mounts(g)
	if filepath.Clean(gm["/etc/grafana/provisioning"]) != "grafana/provisioning" {
		t.Errorf("compose grafana: /etc/grafana/provisioning is %q, want ./grafana/provisioning", gm["/etc/grafana/provisioning"])
	}
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	b, err = os.ReadFile("grafana/provisioning/dashboards/makerfleet.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &prov); err != nil || len(prov.Providers) != 1 {
		t.Fatalf("grafana dashboards provisioning: %v, %d providers", err, len(prov.Providers))
	}
	dash := path.Join(prov.Providers[0].Options.Path, "makerfleet.json")
	if filepath.Clean(gm[dash]) != "grafana/makerfleet.json" {
		t.Errorf("compose grafana: %s is %q, want ./grafana/makerfleet.json", dash, gm[dash])
	}
}
