package deploy_test

import (
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/judge"
)

// What --metrics-addr serves (docs/operations.md): Prometheus text, 200
// while the process runs, 200 only when the role's dependencies answer.
const (
	metricsPath = "/metrics"
	healthzPath = "/healthz"
	readyzPath  = "/readyz"
)

// metricsRoles are the maker subcommands with --metrics-addr; each runs
// with it in every deploy file, probed and scraped there.
var metricsRoles = []string{"coordinator", "voter", "judge", "serve"}

// judgeConfig is the judge's settings file, mounted by compose and copied
// into k8s/70-judge.yaml's ConfigMap.
const judgeConfig = "judge.yaml"

// metricsPort returns the port of a command's --metrics-addr (or
// MAKER_METRICS_ADDR), which must listen on every interface.
func metricsPort(t *testing.T, where string, c makerCmd, env map[string]string) int {
	t.Helper()
	addr, ok := c.flags["metrics-addr"]
	if !ok {
		addr = env["MAKER_METRICS_ADDR"]
	}
	if addr == "" {
		t.Errorf("%s: maker %s without --metrics-addr serves no /metrics, /healthz or /readyz", where, c.sub)
		return 0
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil || (host != "0.0.0.0" && host != "" && host != "::") {
		t.Errorf("%s: --metrics-addr %q must listen on all interfaces", where, addr)
		return 0
	}
	n, err := strconv.Atoi(p)
	if err != nil || n == 0 {
		t.Errorf("%s: --metrics-addr %q: give the port", where, addr)
		return 0
	}
	return n
}

func isMetricsRole(sub string) bool {
	for _, r := range metricsRoles {
		if r == sub {
			return true
		}
	}
	return false
}

// checkProbes: every role with metrics is liveness-probed on /healthz and
// readiness-probed on /readyz at its --metrics-addr port, and annotated
// for Prometheus with that port and /metrics.
func (k *cluster) checkProbes(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range k.workloads {
		for _, c := range w.Template.Spec.Containers {
			if !c.isMaker() {
				continue
			}
			mc, ok := k.cmds[w.obj.Metadata.Name]
			if !ok || !isMetricsRole(mc.sub) {
				continue
			}
			seen[mc.sub] = true
			where := w.obj.String() + " container " + c.Name
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			port := metricsPort(t, where, mc, env)
			if port == 0 {
				continue
			}
			if _, ok := c.port(intOrString(strconv.Itoa(port))); !ok {
				t.Errorf("%s: metrics port %d is no container port", where, port)
			}
			for _, p := range []struct {
				kind, path string
				probe      *probe
			}{{"liveness", healthzPath, c.LivenessProbe}, {"readiness", readyzPath, c.ReadinessProbe}} {
				switch {
				case p.probe == nil || p.probe.HTTPGet == nil:
					t.Errorf("%s: no %s probe (httpGet %s)", where, p.kind, p.path)
				case p.probe.HTTPGet.Path != p.path:
					t.Errorf("%s: %s probe asks %q, want %s", where, p.kind, p.probe.HTTPGet.Path, p.path)
				default:
					if got, _ := c.port(p.probe.HTTPGet.Port); got != port {
						t.Errorf("%s: %s probe asks port %q (%d); --metrics-addr is port %d", where, p.kind, p.probe.HTTPGet.Port, got, port)
					}
				}
			}
			a := w.Template.Metadata.Annotations
			if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(port) || a["prometheus.io/path"] != metricsPath {
				t.Errorf("%s: pod annotations %v, want prometheus.io/scrape true, port %d, path %s", where, a, port, metricsPath)
			}
		}
	}
	for _, r := range metricsRoles {
		if !seen[r] {
			t.Errorf("no workload runs maker %s", r)
		}
	}
	k.checkJudgeConfig(t)
}

// checkJudgeConfig: the judge reads its --config from the ConfigMap it
// mounts, and that ConfigMap holds judge.yaml as compose mounts it.
func (k *cluster) checkJudgeConfig(t *testing.T) {
	w := k.workload("Deployment", "judge")
	if w == nil {
		t.Errorf("no Deployment judge")
		return
	}
	cfg := k.cmds["judge"].flags["config"]
	if cfg == "" {
		t.Errorf("%s: no --config", w.obj)
		return
	}
	want, err := os.ReadFile(judgeConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The ConfigMap's volume, by name, from the raw pod spec.
	var pod struct {
		Spec struct {
			Template struct {
				Spec struct {
					Volumes []struct {
						Name      string `yaml:"name"`
						ConfigMap *struct {
							Name string `yaml:"name"`
						} `yaml:"configMap"`
					} `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	decodeSpec(t, w.obj, &pod.Spec)
	found := false
	for _, c := range w.Template.Spec.Containers {
		for _, vm := range c.VolumeMounts {
			rel, err := filepath.Rel(vm.MountPath, cfg)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue
			}
			for _, v := range pod.Spec.Template.Spec.Volumes {
				if v.Name != vm.Name || v.ConfigMap == nil {
					continue
				}
				found = true
				cm, ok := k.configs[v.ConfigMap.Name]
				switch {
				case !ok:
					t.Errorf("%s: mounts unknown ConfigMap %q", w.obj, v.ConfigMap.Name)
				case cm.Data[path.Base(cfg)] != string(want):
					t.Errorf("%s: ConfigMap %s key %s is not deploy/%s", w.obj, v.ConfigMap.Name, path.Base(cfg), judgeConfig)
				}
			}
		}
	}
	if !found {
		t.Errorf("%s: --config %s is on no ConfigMap volume", w.obj, cfg)
	}
}

// TestComposeRoles: every role with metrics serves them on all
// interfaces, and its healthcheck asks /readyz there with a wget the
// image has; the judge reads a settings file compose mounts and maker
// parses.
func TestComposeRoles(t *testing.T) {
	t.Parallel()
	cf := loadCompose(t)
	seen := map[string]bool{}
	for name, s := range cf.Services {
		if !s.isMaker() || len(s.Profiles) > 0 {
			continue
		}
		where := "compose " + name
		c, err := parseMaker(s.Command)
		if err != nil {
			continue // TestCompose says why
		}
		if !isMetricsRole(c.sub) {
			continue
		}
		seen[c.sub] = true
		port := metricsPort(t, where, c, s.Environment)
		if port == 0 {
			continue
		}
		want := "http://127.0.0.1:" + strconv.Itoa(port) + readyzPath
		if hc := s.Healthcheck; hc == nil || len(hc.Test) < 2 || hc.Test[0] != "CMD" || !strings.Contains(strings.Join(hc.Test, " "), want) {
			t.Errorf("%s: healthcheck %v does not ask %s", where, s.Healthcheck, want)
		} else if hc.Test[1] == "wget" && !imageHasWget(t) {
			t.Errorf("%s: the image's runtime stage has no wget for the healthcheck", where)
		}
		if c.sub != "judge" {
			continue
		}
		cfg := c.flags["config"]
		if cfg == "" {
			t.Errorf("%s: no --config", where)
			continue
		}
		mounted := false
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == cfg && filepath.Clean(parts[0]) == judgeConfig {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s: --config %s is not ./%s mounted (%q)", where, cfg, judgeConfig, s.Volumes)
		}
	}
	for _, r := range metricsRoles {
		if !seen[r] {
			t.Errorf("compose runs no maker %s", r)
		}
	}
	if _, err := judge.LoadSettings(judgeConfig); err != nil {
		t.Errorf("maker judge --config %s: %v", judgeConfig, err)
	}
}

// imageHasWget: the Dockerfile's runtime stage is Alpine or BusyBox (whose
// busybox has wget) or installs wget.
func imageHasWget(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := strings.Split(string(b), "\nFROM ")
	final := stages[len(stages)-1]
	return strings.HasPrefix(final, "alpine:") || strings.HasPrefix(final, "busybox:") || strings.Contains(final, "wget")
}
