package deploy_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// labelExpr is one matchExpressions entry of a label selector.
type labelExpr struct {
	Key      string   `yaml:"key"`
	Operator string   `yaml:"operator"`
	Values   []string `yaml:"values"`
}

// selects says whether s selects labels; the empty selector selects all
// (as in a NetworkPolicy, unlike a Service's selector).
func (s labelSelector) selects(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	for _, e := range s.MatchExpressions {
		v, has := labels[e.Key]
		switch e.Operator {
		case "In":
			if !has || !slices.Contains(e.Values, v) {
				return false
			}
		case "NotIn":
			if has && slices.Contains(e.Values, v) {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		default:
			return false
		}
	}
	return true
}

type netpolPeer struct {
	PodSelector       *labelSelector `yaml:"podSelector"`
	NamespaceSelector *labelSelector `yaml:"namespaceSelector"`
	IPBlock           *struct {
		CIDR string `yaml:"cidr"`
	} `yaml:"ipBlock"`
}

type netpolPort struct {
	Protocol string      `yaml:"protocol"`
	Port     intOrString `yaml:"port"`
	EndPort  *int        `yaml:"endPort"`
}

type netpol struct {
	PodSelector labelSelector `yaml:"podSelector"`
	PolicyTypes []string      `yaml:"policyTypes"`
	Ingress     []struct {
		From  []netpolPeer `yaml:"from"`
		Ports []netpolPort `yaml:"ports"`
	} `yaml:"ingress"`
	Egress []struct {
		To    []netpolPeer `yaml:"to"`
		Ports []netpolPort `yaml:"ports"`
	} `yaml:"egress"`

	obj *object
}

// source is where a connection comes from: a pod with labels in a
// namespace (whose kubernetes.io/metadata.name is its name).
type source struct {
	name   string
	ns     string
	labels map[string]string
}

// target is a container port of a workload's pods.
type target struct {
	w    *workload
	port int
}

func (d target) String() string { return fmt.Sprintf("%s:%d", d.w.obj.Metadata.Name, d.port) }

// Namespaces outside the fleet that the policies name: KEDA's operator
// and Prometheus. An ingress controller's and any other are "elsewhere".
const (
	kedaNS       = "keda"
	monitoringNS = "monitoring"
)

// submitLabels are the labels of a pod started to submit a job
// (kubectl run submit --labels ..., README.md).
var submitLabels = map[string]string{"app.kubernetes.io/name": "submit"}

func (p netpolPeer) admits(s source) bool {
	if p.IPBlock != nil {
		return false // pods are not addressed by CIDR here
	}
	nsLabels := map[string]string{"kubernetes.io/metadata.name": s.ns}
	switch {
	case p.NamespaceSelector != nil && !p.NamespaceSelector.selects(nsLabels):
		return false
	case p.NamespaceSelector == nil && s.ns != namespace:
		return false // a bare podSelector means this namespace
	case p.PodSelector != nil && !p.PodSelector.selects(s.labels):
		return false
	}
	return true
}

// portMatches: the rule's port is the target's port, by number or by the
// container's name for it.
func (p netpolPort) matches(d target) bool {
	if p.Protocol != "" && p.Protocol != "TCP" {
		return false
	}
	n, ok := 0, false
	for _, c := range d.w.Template.Spec.Containers {
		if cp, found := c.port(p.Port); found {
			n, ok = cp, true
		}
	}
	if !ok {
		var err error
		if n, err = strconv.Atoi(string(p.Port)); err != nil {
			return false
		}
	}
	if p.EndPort != nil {
		return d.port >= n && d.port <= *p.EndPort
	}
	return d.port == n
}

// allowed evaluates the policies as Kubernetes does for ingress: a pod no
// policy selects for Ingress takes everything; one that some policy
// selects takes what any rule of those policies allows.
func allowed(pols []netpol, s source, d target) bool {
	isolated := false
	for _, p := range pols {
		if !slices.Contains(p.PolicyTypes, "Ingress") || !p.PodSelector.selects(d.w.Template.Metadata.Labels) {
			continue
		}
		isolated = true
		for _, r := range p.Ingress {
			from := len(r.From) == 0 || slices.ContainsFunc(r.From, func(peer netpolPeer) bool { return peer.admits(s) })
			port := len(r.Ports) == 0 || slices.ContainsFunc(r.Ports, func(pp netpolPort) bool { return pp.matches(d) })
			if from && port {
				return true
			}
		}
	}
	return !isolated
}

// checkNetworkPolicies: the policies are well formed, deny ingress by
// default, and allow exactly the connections the fleet makes: each maker
// command's --nats, --redis and --llm-base-url, KEDA to the NATS
// monitoring port, Prometheus to each role's metrics port, anyone to the
// API, a submit pod to NATS; and nothing else.
func (k *cluster) checkNetworkPolicies(t *testing.T) {
	var pols []netpol
	defaultDeny := false
	for _, o := range k.netpols {
		p := netpol{obj: o}
		decodeSpec(t, o, &p)
		pols = append(pols, p)
		if len(p.PolicyTypes) == 0 {
			t.Errorf("%s: no policyTypes", o)
		}
		for _, pt := range p.PolicyTypes {
			if pt != "Ingress" && pt != "Egress" {
				t.Errorf("%s: policyType %q", o, pt)
			}
		}
		empty := len(p.PodSelector.MatchLabels) == 0 && len(p.PodSelector.MatchExpressions) == 0
		defaultDeny = defaultDeny || (empty && slices.Contains(p.PolicyTypes, "Ingress") && len(p.Ingress) == 0)
		k.checkSelector(t, o.String()+" podSelector", p.PodSelector, !empty)
		for _, r := range p.Ingress {
			for _, peer := range r.From {
				if peer.PodSelector != nil && peer.NamespaceSelector == nil {
					k.checkSelector(t, o.String()+" from podSelector", *peer.PodSelector, true)
				}
			}
			for _, pp := range r.Ports {
				if !k.hasPort(p.PodSelector, pp.Port) {
					t.Errorf("%s: port %q is no container port of the pods it selects", o, pp.Port)
				}
			}
		}
	}
	if !defaultDeny {
		t.Errorf("no NetworkPolicy denies ingress by default (podSelector {}, policyTypes [Ingress], no rules)")
	}

	// The connections the fleet makes.
	want := map[string]bool{} // source name + " -> " + target
	for _, w := range k.workloads {
		c, ok := k.cmds[w.obj.Metadata.Name]
		if !ok {
			continue
		}
		src := podOf(w)
		for _, e := range endpoints(t, "k8s "+w.obj.Metadata.Name, c) {
			svc, ok := k.services[e.host]
			if !ok {
				continue // checkEndpoints says why
			}
			if dst := k.selected(t, "Service "+e.host, svc.Selector); dst != nil {
				want[src.name+" -> "+target{dst, k.servicePort[fmt.Sprintf("%s:%d", e.host, e.port)]}.String()] = true
			}
		}
		if isMetricsRole(c.sub) {
			port, _ := strconv.Atoi(w.Template.Metadata.Annotations["prometheus.io/port"])
			want["ns "+monitoringNS+" -> "+target{w, port}.String()] = true
		}
		if c.sub == "serve" {
			for _, s := range k.services {
				if !matches(s.Selector, w.Template.Metadata.Labels) {
					continue
				}
				for _, p := range s.Ports {
					cp, _ := w.Template.Spec.Containers[0].port(cmpOrPort(p.TargetPort, p.Port))
					for _, from := range []string{"ns elsewhere", "ns " + kedaNS, "ns " + monitoringNS, "submit"} {
						want[from+" -> "+target{w, cp}.String()] = true
					}
					for _, o := range k.workloads {
						want[podOf(o).name+" -> "+target{w, cp}.String()] = true
					}
				}
			}
		}
	}
	if nats := k.workload("StatefulSet", "nats"); nats != nil {
		want["submit -> "+target{nats, 4222}.String()] = true
	}
	if k.kedaMonitor != nil {
		want["ns "+kedaNS+" -> "+k.kedaMonitor.String()] = true
	}

	// Every source against every container port of every workload.
	sources := []source{
		{name: "ns " + kedaNS, ns: kedaNS, labels: map[string]string{"app": "keda-operator"}},
		{name: "ns " + monitoringNS, ns: monitoringNS, labels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
		{name: "ns elsewhere", ns: "ingress-nginx", labels: map[string]string{"app.kubernetes.io/name": "ingress-nginx"}},
		{name: "submit", ns: namespace, labels: submitLabels},
	}
	for _, w := range k.workloads {
		sources = append(sources, podOf(w))
	}
	for _, s := range sources {
		for _, w := range k.workloads {
			for _, c := range w.Template.Spec.Containers {
				for _, p := range c.Ports {
					d := target{w, p.ContainerPort}
					key := s.name + " -> " + d.String()
					if got := allowed(pols, s, d); got != want[key] {
						t.Errorf("NetworkPolicy: %s allowed %v, want %v", key, got, want[key])
					}
				}
			}
		}
	}
}

func podOf(w *workload) source {
	return source{name: w.obj.Metadata.Name, ns: namespace, labels: w.Template.Metadata.Labels}
}

func cmpOrPort(p intOrString, n int) intOrString {
	if p != "" {
		return p
	}
	return intOrString(strconv.Itoa(n))
}

// hasPort: some pod sel selects has container port p (a name or a number).
func (k *cluster) hasPort(sel labelSelector, p intOrString) bool {
	return slices.ContainsFunc(k.workloads, func(w *workload) bool {
		return sel.selects(w.Template.Metadata.Labels) && slices.ContainsFunc(w.Template.Spec.Containers, func(c container) bool {
			_, ok := c.port(p)
			return ok
		})
	})
}

// checkSelector: a selector's operators are Kubernetes', it selects some
// workload, and each value of an In names a workload (or the submit pod).
func (k *cluster) checkSelector(t *testing.T, where string, sel labelSelector, mustSelect bool) {
	for _, e := range sel.MatchExpressions {
		switch e.Operator {
		case "In", "NotIn":
			if len(e.Values) == 0 {
				t.Errorf("%s: %s %s with no values", where, e.Key, e.Operator)
			}
		case "Exists", "DoesNotExist":
			if len(e.Values) > 0 {
				t.Errorf("%s: %s %s takes no values", where, e.Key, e.Operator)
			}
		default:
			t.Errorf("%s: unknown operator %q", where, e.Operator)
		}
		if e.Operator != "In" {
			continue
		}
		for _, v := range e.Values {
			known := submitLabels[e.Key] == v || slices.ContainsFunc(k.workloads, func(w *workload) bool {
				return w.Template.Metadata.Labels[e.Key] == v
			})
			if !known {
				t.Errorf("%s: %s=%s labels no pod", where, e.Key, v)
			}
		}
	}
	if mustSelect && !slices.ContainsFunc(k.workloads, func(w *workload) bool { return sel.selects(w.Template.Metadata.Labels) }) {
		t.Errorf("%s: selects no workload's pods", where)
	}
}
