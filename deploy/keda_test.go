package deploy_test

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v4"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// kedaCRD is KEDA's ScaledObject CustomResourceDefinition, vendored from
// github.com/kedacore/keda v2.20.2 (config/crd/bases/keda.sh_scaledobjects.yaml).
const kedaCRD = "testdata/keda.sh_scaledobjects.yaml"

// kedaCEL lists the CEL rules (x-kubernetes-validations) of the CRD, which
// a JSON Schema cannot say; checkScaledObjects checks each by hand. A new
// rule in a newer CRD fails the test until it is checked too.
var kedaCEL = []string{
	"!has(self.minReplicaCount) || self.minReplicaCount <= (has(self.maxReplicaCount) ? self.maxReplicaCount : 100)",
}

// natsJetStreamKeys are the trigger metadata keys KEDA's nats-jetstream
// scaler reads (pkg/scalers/nats_jetstream_scaler.go, v2.20.2); any other
// key is ignored by KEDA, so here it is a typo.
var natsJetStreamKeys = map[string]bool{
	"natsServerMonitoringEndpoint": true, "account": true, "accountID": true,
	"stream": true, "consumer": true, "lagThreshold": true,
	"activationLagThreshold": true, "useHttps": true,
}

// openAPIToJSONSchema turns a CRD's openAPIV3Schema into JSON Schema: an
// object with properties takes no others (as kubectl's strict field
// validation; unknown fields would be dropped silently otherwise) unless
// it preserves unknown fields; the Kubernetes extensions and the formats
// (int32, date-time) are dropped. The CEL rules are collected in cel.
func openAPIToJSONSchema(v any, cel *[]string) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			switch {
			case k == "x-kubernetes-validations":
				for _, r := range x.([]any) {
					*cel = append(*cel, strings.Join(strings.Fields(r.(map[string]any)["rule"].(string)), " "))
				}
			case strings.HasPrefix(k, "x-kubernetes-"), k == "format", k == "description":
			case k == "properties":
				props := map[string]any{}
				for name, p := range x.(map[string]any) {
					props[name] = openAPIToJSONSchema(p, cel)
				}
				out[k] = props
			default:
				out[k] = openAPIToJSONSchema(x, cel)
			}
		}
		_, hasProps := v["properties"]
		_, hasAdditional := v["additionalProperties"]
		if hasProps && !hasAdditional && v["x-kubernetes-preserve-unknown-fields"] != true {
			out["additionalProperties"] = false
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = openAPIToJSONSchema(x, cel)
		}
		return out
	}
	return v
}

// toJSON turns decoded YAML into what jsonschema validates.
func toJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// scaledObjectSchema compiles the vendored CRD's v1alpha1 schema.
func scaledObjectSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := os.ReadFile(kedaCRD)
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Group    string `yaml:"group"`
			Versions []struct {
				Name   string `yaml:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
				} `yaml:"schema"`
			} `yaml:"versions"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatalf("%s: %v", kedaCRD, err)
	}
	for _, v := range crd.Spec.Versions {
		if crd.Spec.Group+"/"+v.Name != "keda.sh/v1alpha1" {
			continue
		}
		var cel []string
		doc := openAPIToJSONSchema(v.Schema.OpenAPIV3Schema, &cel)
		if !slices.Equal(cel, kedaCEL) {
			t.Fatalf("%s: CEL rules %q, the test checks %q", kedaCRD, cel, kedaCEL)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource("scaledobject.json", toJSON(t, doc)); err != nil {
			t.Fatal(err)
		}
		s, err := c.Compile("scaledobject.json")
		if err != nil {
			t.Fatalf("%s: %v", kedaCRD, err)
		}
		return s
	}
	t.Fatalf("%s: no version keda.sh/v1alpha1", kedaCRD)
	return nil
}

// The schema must reject what KEDA rejects, or validating against it
// proves nothing.
func TestScaledObjectSchemaRejects(t *testing.T) {
	t.Parallel()
	s := scaledObjectSchema(t)
	const good = `
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: v, namespace: n}
spec:
  scaleTargetRef: {name: voter}
  minReplicaCount: 1
  triggers: [{type: nats-jetstream, metadata: {stream: S}}]
`
	for name, edit := range map[string]func(spec map[string]any){
		"good":                 func(map[string]any) {},
		"misspelt field":       func(s map[string]any) { s["maxReplicas"] = 3 },
		"no scaleTargetRef":    func(s map[string]any) { delete(s, "scaleTargetRef") },
		"target without name":  func(s map[string]any) { s["scaleTargetRef"] = map[string]any{"kind": "Deployment"} },
		"no triggers":          func(s map[string]any) { s["triggers"] = []any{} },
		"replicas as a string": func(s map[string]any) { s["minReplicaCount"] = "1" },
		"metadata not strings": func(s map[string]any) {
			s["triggers"] = []any{map[string]any{"type": "nats-jetstream", "metadata": map[string]any{"lagThreshold": 10}}}
		},
		"trigger without type": func(s map[string]any) {
			s["triggers"] = []any{map[string]any{"metadata": map[string]any{}}}
		},
	} {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(good), &obj); err != nil {
			t.Fatal(err)
		}
		edit(obj["spec"].(map[string]any))
		err := s.Validate(toJSON(t, obj))
		if name == "good" && err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if name != "good" && err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

type scaledObject struct {
	ScaleTargetRef struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Name       string `yaml:"name"`
	} `yaml:"scaleTargetRef"`
	MinReplicaCount *int `yaml:"minReplicaCount"`
	MaxReplicaCount *int `yaml:"maxReplicaCount"`
	Triggers        []struct {
		Type     string            `yaml:"type"`
		Metadata map[string]string `yaml:"metadata"`
	} `yaml:"triggers"`
}

// checkScaledObjects: each ScaledObject is valid against KEDA's CRD and
// scales a known Deployment from its replica count up; the voters are
// scaled on the lag of the samples consumer the code names, read from the
// NATS monitoring port.
func (k *cluster) checkScaledObjects(t *testing.T) {
	schema := scaledObjectSchema(t)
	voters := 0
	for _, o := range k.scaled {
		raw, err := os.ReadFile(o.file)
		if err != nil {
			t.Fatal(err)
		}
		// The whole object, as the API server gets it.
		var doc map[string]any
		for dec := yaml.NewDecoder(bytes.NewReader(raw)); dec.Decode(&doc) == nil; doc = nil {
			if doc["kind"] == o.Kind {
				break
			}
		}
		if err := schema.Validate(toJSON(t, doc)); err != nil {
			t.Errorf("%s: not valid against KEDA's CRD: %v", o, err)
		}
		var so scaledObject
		decodeSpec(t, o, &so)
		ref := so.ScaleTargetRef
		w := k.workload(cmpOr(ref.Kind, "Deployment"), ref.Name)
		if w == nil || cmpOr(ref.APIVersion, "apps/v1") != w.obj.APIVersion {
			t.Errorf("%s: scales unknown %s %s/%s", o, ref.APIVersion, ref.Kind, ref.Name)
			continue
		}
		lo, hi := 0, 100 // KEDA's defaults, as in the CRD's CEL rule
		if so.MinReplicaCount != nil {
			lo = *so.MinReplicaCount
		}
		if so.MaxReplicaCount != nil {
			hi = *so.MaxReplicaCount
		}
		switch {
		case lo > hi:
			t.Errorf("%s: minReplicaCount %d > maxReplicaCount %d", o, lo, hi)
		case lo < 1:
			t.Errorf("%s: minReplicaCount %d: keep a voter up, a job's first samples must not wait for a pod", o, lo)
		case w.Replicas != nil && (*w.Replicas < lo || *w.Replicas > hi):
			t.Errorf("%s: %s has %d replicas, outside %d..%d", o, w.obj, *w.Replicas, lo, hi)
		}
		if ref.Name != "voter" {
			continue
		}
		voters++
		if len(so.Triggers) != 1 || so.Triggers[0].Type != "nats-jetstream" {
			t.Errorf("%s: want one nats-jetstream trigger, got %+v", o, so.Triggers)
			continue
		}
		k.checkNATSTrigger(t, o.String(), so.Triggers[0].Metadata)
	}
	if voters != 1 {
		t.Errorf("%d ScaledObjects scale the voters, want 1", voters)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkNATSTrigger: the nats-jetstream scaler's metadata names the voters'
// consumer of the samples stream (as internal/bus names them in the
// default namespace, the one every role joins) on a NATS Service port that
// reaches nats-server's monitoring port.
func (k *cluster) checkNATSTrigger(t *testing.T, where string, md map[string]string) {
	for key := range md {
		if !natsJetStreamKeys[key] {
			t.Errorf("%s: metadata %q is no key of the nats-jetstream scaler", where, key)
		}
	}
	for _, key := range []string{"natsServerMonitoringEndpoint", "stream", "consumer", "lagThreshold"} {
		if md[key] == "" {
			t.Errorf("%s: no metadata %s", where, key)
		}
	}
	if md["account"] == "" && md["accountID"] == "" {
		t.Errorf("%s: the scaler needs account or accountID", where)
	}
	if want := bus.DefaultNamespace.SamplesStream(); md["stream"] != want {
		t.Errorf("%s: stream %q, the voters' stream is %q", where, md["stream"], want)
	}
	if md["consumer"] != bus.ConsumerVoters {
		t.Errorf("%s: consumer %q, the voters' consumer is %q", where, md["consumer"], bus.ConsumerVoters)
	}
	for _, key := range []string{"lagThreshold", "activationLagThreshold"} {
		if v, ok := md[key]; ok {
			if n, err := strconv.Atoi(v); err != nil || n < 0 || (key == "lagThreshold" && n == 0) {
				t.Errorf("%s: %s %q is no positive count", where, key, v)
			}
		}
	}
	// host:port, no scheme (useHttps picks it).
	ep := md["natsServerMonitoringEndpoint"]
	host, port, err := net.SplitHostPort(ep)
	if err != nil || strings.Contains(ep, "/") {
		t.Errorf("%s: natsServerMonitoringEndpoint %q: want HOST:PORT", where, ep)
		return
	}
	svc := strings.TrimSuffix(strings.TrimSuffix(host, ".svc.cluster.local"), ".svc")
	if svc == host || !strings.HasSuffix(svc, "."+namespace) {
		t.Errorf("%s: natsServerMonitoringEndpoint %q: KEDA runs in its own namespace, give SERVICE.%s.svc.cluster.local", where, ep, namespace)
	}
	svc = strings.TrimSuffix(svc, "."+namespace)
	cp, ok := k.servicePort[svc+":"+port]
	if !ok {
		t.Errorf("%s: natsServerMonitoringEndpoint %q is no Service port", where, ep)
		return
	}
	nats := k.workload("StatefulSet", "nats")
	if nats == nil {
		return
	}
	c := nats.Template.Spec.Containers[0]
	if monitor := argAfter(c.argv(), "-m", "--http_port"); monitor != strconv.Itoa(cp) {
		t.Errorf("%s: %s reaches container port %d, nats-server monitors on %q", where, ep, cp, monitor)
	}
	k.kedaMonitor = &target{w: nats, port: cp}
}
