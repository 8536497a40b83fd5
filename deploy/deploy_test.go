package deploy_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.yaml.in/yaml/v4"

	"github.com/makerfleet/makerfleet/cmd/maker/cli"
	"github.com/makerfleet/makerfleet/internal/simllm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	namespace = "makerfleet"
	// makerImage is the repository of our own image; every other image is
	// third-party and must be pinned.
	makerImage = "makerfleet/maker"
	// versionVar is what -ldflags -X sets; cli.Version below keeps it honest.
	versionVar = "github.com/makerfleet/makerfleet/cmd/maker/cli.Version"
)

var _ = cli.Version

// ---- the command line ----------------------------------------------------

// makerCmd is one `maker ...` command line, checked against the real CLI.
type makerCmd struct {
	sub   string
	flags map[string]string // long name → value ("true" for a bare bool)
}

// flagLine finds a flag in cobra's help: "  -q, --quiet   ..." or
// "      --nats string   ...". The capture is the value type, empty for
// booleans.
func flagLine(name string) *regexp.Regexp {
	if len(name) == 1 {
		return regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(name) + `, --[\w-]+(?: (\S+))?\s{2,}`)
	}
	return regexp.MustCompile(`(?m)^\s+(?:-\w, )?--` + regexp.QuoteMeta(name) + `(?: (\S+))?\s{2,}`)
}

// parseMaker runs `maker <args> --help` through cli.Main, which parses and
// type-checks every flag, and then finds each flag in that subcommand's
// help output.
func parseMaker(args []string) (makerCmd, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return makerCmd{}, fmt.Errorf("%q: no subcommand first", args)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if code := cli.Main(ctx, append(slices.Clone(args), "--help"), &stdout, &stderr); code != cli.ExitOK {
		return makerCmd{}, fmt.Errorf("maker %s --help: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(stderr.String()))
	}
	help := stdout.String()
	if !strings.Contains(help, "maker "+args[0]+" [flags]") {
		return makerCmd{}, fmt.Errorf("maker %s --help printed no usage of %q:\n%s", args[0], args[0], help)
	}
	c := makerCmd{sub: args[0], flags: map[string]string{}}
	for i := 1; i < len(args); i++ {
		tok := args[i]
		if !strings.HasPrefix(tok, "-") {
			return makerCmd{}, fmt.Errorf("maker %s: stray argument %q", args[0], tok)
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(tok, "-"), "=")
		m := flagLine(name).FindStringSubmatch(help)
		if m == nil {
			return makerCmd{}, fmt.Errorf("maker %s: flag %q is not in its --help", args[0], tok)
		}
		if len(name) == 1 {
			name = regexp.MustCompile(`--([\w-]+)`).FindStringSubmatch(m[0])[1]
		}
		switch {
		case hasValue:
		case m[1] == "": // a boolean
			value = "true"
		case i+1 < len(args):
			i++
			value = args[i]
		default:
			return makerCmd{}, fmt.Errorf("maker %s: %s needs a value", args[0], tok)
		}
		c.flags[name] = value
	}
	return c, nil
}

// The checker must reject what the CLI rejects, or the checks below prove
// nothing.
func TestParseMakerRejects(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"--nats", "nats://x:4222"},
		{"no-such-command"},
		{"voter", "--no-such-flag", "x"},
		{"voter", "--concurrency", "many"},
		{"coordinator", "--llm-base-url", "http://x/v1"}, // a voter flag
		{"simllm", "--addr"},
		{"simllm", "stray"},
	} {
		if _, err := parseMaker(args); err == nil {
			t.Errorf("parseMaker(%q) accepted it", args)
		}
	}
	c, err := parseMaker([]string{"submit", "--nats=nats://n:4222", "--wait", "-q", "--disks", "3"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"nats": "nats://n:4222", "wait": "true", "quiet": "true", "disks": "3"}
	if !maps.Equal(c.flags, want) {
		t.Errorf("flags %v, want %v", c.flags, want)
	}
}

// ---- images and ports ------------------------------------------------------

// splitImage splits "repo:tag"; a registry port is not a tag.
func splitImage(image string) (repo, tag string) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, ""
	}
	return image[:i], image[i+1:]
}

// checkImage: our image has a tag; a third-party one has a pinned tag
// (not latest, not a variable).
func checkImage(t *testing.T, where, image string) {
	t.Helper()
	repo, tag := splitImage(image)
	switch {
	case strings.Contains(image, "@sha256:"):
	case tag == "":
		t.Errorf("%s: image %q has no tag", where, image)
	case tag == "latest" || strings.HasPrefix(tag, "latest-"):
		t.Errorf("%s: image %q uses latest", where, image)
	case repo != makerImage && strings.Contains(tag, "$"):
		t.Errorf("%s: third-party image %q is not pinned", where, image)
	}
}

// listenPorts are the ports a container listens on, from its image and
// command line; the first is the one clients use.
func listenPorts(t *testing.T, where, image string, args []string) []int {
	t.Helper()
	repo, _ := splitImage(image)
	flagValue := func(names ...string) string {
		for i, a := range args {
			for _, n := range names {
				if a == n && i+1 < len(args) {
					return args[i+1]
				}
				if v, ok := strings.CutPrefix(a, n+"="); ok {
					return v
				}
			}
		}
		return ""
	}
	var ports []string
	switch {
	case repo == makerImage && len(args) > 0 && args[0] == "simllm":
		addr := flagValue("--addr")
		if addr == "" {
			t.Fatalf("%s: simllm without --addr listens on loopback only", where)
		}
		host, p, err := net.SplitHostPort(addr)
		if err != nil || (host != "0.0.0.0" && host != "" && host != "::") {
			t.Fatalf("%s: simllm --addr %q must listen on all interfaces", where, addr)
		}
		ports = []string{p}
	case repo == "nats" || strings.HasSuffix(repo, "/nats"):
		ports = []string{cmp.Or(flagValue("-p", "--port"), "4222")}
		if m := flagValue("-m", "--http_port"); m != "" {
			ports = append(ports, m)
		}
	case repo == "redis" || strings.HasSuffix(repo, "/redis"):
		ports = []string{cmp.Or(flagValue("--port"), "6379")}
	case repo == "prom/prometheus":
		_, p, _ := strings.Cut(cmp.Or(flagValue("--web.listen-address"), ":9090"), ":")
		ports = []string{p}
	case repo == "grafana/grafana":
		ports = []string{"3000"}
	default:
		t.Fatalf("%s: no known listen port for image %q %q", where, image, args)
	}
	out := make([]int, len(ports))
	for i, p := range ports {
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("%s: port %q: %v", where, p, err)
		}
		out[i] = n
	}
	return out
}

// endpoint is a URL a maker command connects to.
type endpoint struct {
	flag, scheme, host string
	port               int
}

// endpoints returns the URLs in a maker command line, with their schemes
// checked.
func endpoints(t *testing.T, where string, c makerCmd) []endpoint {
	t.Helper()
	schemes := map[string][]string{"nats": {"nats", "tls"}, "redis": {"redis", "rediss"}, "llm-base-url": {"http", "https"}}
	var out []endpoint
	for flag, ok := range schemes {
		raw, set := c.flags[flag]
		if !set {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Errorf("%s: --%s %q: %v", where, flag, raw, err)
			continue
		}
		if !slices.Contains(ok, u.Scheme) {
			t.Errorf("%s: --%s %q: scheme %q, want one of %v", where, flag, raw, u.Scheme, ok)
		}
		if flag == "llm-base-url" && !strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/v1") {
			t.Errorf("%s: --llm-base-url %q should end in /v1", where, raw)
		}
		port, err := strconv.Atoi(u.Port())
		if err != nil {
			t.Errorf("%s: --%s %q: give the port explicitly", where, flag, raw)
			continue
		}
		out = append(out, endpoint{flag: flag, scheme: u.Scheme, host: u.Hostname(), port: port})
	}
	return out
}

// goModVersion returns the version go.mod requires of module, or the go
// directive for "go".
func goModVersion(t *testing.T, module string) string {
	t.Helper()
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + `\s+v?(\S+)`)
	if module == "go" {
		re = regexp.MustCompile(`(?m)^go\s+(\S+)`)
	}
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("go.mod: no %s", module)
	}
	return string(m[1])
}

// minor returns "1.26" of "1.26.8", "v1.26.8" or "1.26.8-alpine".
func minor(v string) string {
	v = strings.TrimPrefix(v, "v")
	v, _, _ = strings.Cut(v, "-")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// ---- Dockerfile ----------------------------------------------------------

func TestDockerfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines, drop comments.
	text := regexp.MustCompile(`\\\n`).ReplaceAllString(string(b), " ")
	type stage struct {
		image, name string
		lines       []string
	}
	var stages []*stage
	args := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		inst, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(inst) {
		case "FROM":
			f := strings.Fields(rest)
			s := &stage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		case "ARG":
			name, _, _ := strings.Cut(rest, "=")
			args[name] = true
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage build, got %d stages", len(stages))
	}
	names := map[string]bool{}
	for _, s := range stages {
		if !names[s.image] {
			checkImage(t, "Dockerfile FROM", s.image)
		}
		names[s.name] = true
	}

	build, final := stages[0], stages[len(stages)-1]
	repo, tag := splitImage(build.image)
	if repo != "golang" {
		t.Errorf("build stage FROM %s, want golang", build.image)
	} else if got, want := minor(tag), minor(goModVersion(t, "go")); got != want {
		t.Errorf("build stage Go %s, go.mod says %s", got, want)
	}
	buildText := strings.Join(build.lines, "\n")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/maker", "-X " + versionVar + "="} {
		if !strings.Contains(buildText, want) {
			t.Errorf("build stage has no %q", want)
		}
	}
	if r, _ := splitImage(final.image); r == "golang" {
		t.Errorf("runtime stage is %s: ship only the binary", final.image)
	}
	var user, entrypoint string
	copied := false
	for _, l := range final.lines {
		inst, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(inst) {
		case "USER":
			user = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			entrypoint = strings.TrimSpace(rest)
		case "COPY":
			copied = copied || strings.Contains(rest, "--from="+build.name)
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("runtime stage USER %q, want a non-root user", user)
	}
	if entrypoint != `["maker"]` {
		t.Errorf(`ENTRYPOINT %s, want ["maker"]`, entrypoint)
	}
	if !copied {
		t.Errorf("runtime stage copies nothing from stage %q", build.name)
	}

	// Compose passes only build args the Dockerfile declares.
	cf := loadCompose(t)
	for name, s := range cf.Services {
		if s.Build == nil {
			continue
		}
		for arg := range s.Build.Args {
			if !args[arg] {
				t.Errorf("compose %s: build arg %s is no ARG in the Dockerfile", name, arg)
			}
		}
	}
}

// ---- docker-compose.yml ----------------------------------------------------

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	Networks map[string]any            `yaml:"networks"`
	// Extensions holds x-* keys; anything else is a typo.
	Extensions map[string]any `yaml:",inline"`
}

// composeService lists the keys the file may use; decoding with
// KnownFields rejects any other, so a misspelt key fails here rather than
// being ignored.
type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string            `yaml:"context"`
		Dockerfile string            `yaml:"dockerfile"`
		Args       map[string]string `yaml:"args"`
	} `yaml:"build"`
	Command         []string          `yaml:"command"`
	Entrypoint      []string          `yaml:"entrypoint"`
	Environment     map[string]string `yaml:"environment"`
	Ports           []string          `yaml:"ports"`
	Expose          []string          `yaml:"expose"`
	Volumes         []string          `yaml:"volumes"`
	Profiles        []string          `yaml:"profiles"`
	Restart         string            `yaml:"restart"`
	ReadOnly        bool              `yaml:"read_only"`
	CapDrop         []string          `yaml:"cap_drop"`
	SecurityOpt     []string          `yaml:"security_opt"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	DependsOn       map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Timeout  string   `yaml:"timeout"`
		Retries  int      `yaml:"retries"`
	} `yaml:"healthcheck"`
	Deploy struct {
		Replicas  *int `yaml:"replicas"`
		Resources struct {
			Limits       map[string]string `yaml:"limits"`
			Reservations map[string]string `yaml:"reservations"`
		} `yaml:"resources"`
	} `yaml:"deploy"`
}

var composeVar = regexp.MustCompile(`\$\{(\w+)(?::?-([^}]*))?\}`)

// interpolate replaces ${VAR:-default} with its default, as compose does
// with VAR unset.
func interpolate(s string) string {
	return composeVar.ReplaceAllStringFunc(s, func(m string) string { return composeVar.FindStringSubmatch(m)[2] })
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	f, err := os.Open("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var cf composeFile
	if err := dec.Decode(&cf); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for k := range cf.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("docker-compose.yml: unknown top-level key %q", k)
		}
	}
	return cf
}

// isMaker says whether a compose service runs our image.
func (s composeService) isMaker() bool {
	repo, _ := splitImage(interpolate(s.Image))
	return repo == makerImage
}

func TestCompose(t *testing.T) {
	t.Parallel()
	cf := loadCompose(t)
	for _, want := range []string{"nats", "redis", "simllm", "coordinator", "voter", "judge", "api"} {
		if _, ok := cf.Services[want]; !ok {
			t.Fatalf("no service %q", want)
		}
	}

	ports := map[string][]int{}   // service → the ports it listens on
	cmds := map[string]makerCmd{} // maker services' command lines
	replicas := map[string]int{}  // maker subcommand → containers running it
	for name, s := range cf.Services {
		where := "compose " + name
		if s.Image == "" {
			t.Errorf("%s: no image", where)
			continue
		}
		image := interpolate(s.Image)
		checkImage(t, where, s.Image)
		if len(s.Entrypoint) > 0 {
			t.Errorf("%s: entrypoint overridden; the image's is maker (or the server's)", where)
		}
		for dep, d := range s.DependsOn {
			target, ok := cf.Services[dep]
			switch {
			case !ok:
				t.Errorf("%s: depends on unknown service %q", where, dep)
			case d.Condition == "service_healthy" && target.Healthcheck == nil:
				t.Errorf("%s: waits for %s to be healthy, which has no healthcheck", where, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				if _, ok := cf.Volumes[src]; !ok {
					t.Errorf("%s: named volume %q is not declared under volumes:", where, src)
				}
			}
		}
		if !s.isMaker() {
			ports[name] = listenPorts(t, where, image, s.Command)
			continue
		}
		if s.Build == nil {
			t.Errorf("%s: no build section for %s", where, image)
		} else {
			ctxDir := filepath.Join(".", s.Build.Context)
			if _, err := os.Stat(filepath.Join(ctxDir, "go.mod")); err != nil {
				t.Errorf("%s: build context %q holds no go.mod", where, s.Build.Context)
			}
			if _, err := os.Stat(filepath.Join(ctxDir, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: dockerfile: %v", where, err)
			}
		}
		if len(s.Deploy.Resources.Limits["memory"]) == 0 && len(s.Profiles) == 0 {
			t.Errorf("%s: no memory limit", where)
		}
		c, err := parseMaker(s.Command)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		cmds[name] = c
		if c.sub == "simllm" {
			ports[name] = listenPorts(t, where, image, s.Command)
		}
		if len(s.Profiles) == 0 {
			n := 1
			if s.Deploy.Replicas != nil {
				n = *s.Deploy.Replicas
			}
			replicas[c.sub] += n
		}
	}

	if replicas["coordinator"] != 2 {
		t.Errorf("%d coordinators, want 2", replicas["coordinator"])
	}
	if v := cf.Services["voter"]; v.Deploy.Replicas == nil || *v.Deploy.Replicas != 3 {
		t.Errorf("voter: deploy.replicas must be 3")
	}
	if _, ok := cmds["voter"].flags["concurrency"]; !ok {
		t.Errorf("voter: no --concurrency")
	}
	if got, want := cmds["voter"].flags["model"], modelOf(cmds["simllm"]); got != want {
		t.Errorf("voter --model %q, the simulated model serves %q", got, want)
	}

	// Every URL names a service and the port it listens on.
	for name, c := range cmds {
		for _, e := range endpoints(t, "compose "+name, c) {
			p, ok := ports[e.host]
			switch {
			case !ok:
				t.Errorf("compose %s: --%s host %q is no service", name, e.flag, e.host)
			case !slices.Contains(p, e.port):
				t.Errorf("compose %s: --%s port %d, service %s listens on %v", name, e.flag, e.port, e.host, p)
			}
		}
	}

	// Stateful services keep their data on a volume.
	nats := cf.Services["nats"]
	if !hasAny(nats.Command, "--jetstream", "-js") {
		t.Errorf("nats: JetStream is off (%q)", nats.Command)
	}
	checkMounted(t, "compose nats", argAfter(nats.Command, "--store_dir", "-sd"), nats.Volumes)
	redis := cf.Services["redis"]
	if argAfter(redis.Command, "--appendonly") != "yes" {
		t.Errorf("redis: appendonly is off (%q)", redis.Command)
	}
	checkMounted(t, "compose redis", "/data", redis.Volumes)

	for _, name := range []string{"nats", "redis", "simllm"} {
		if hc := cf.Services[name].Healthcheck; hc == nil || len(hc.Test) < 2 {
			t.Errorf("%s: no healthcheck", name)
		}
	}
	// The simulated model's healthcheck asks the port it listens on.
	if hc := cf.Services["simllm"].Healthcheck; hc != nil {
		if want := fmt.Sprintf(":%d/", ports["simllm"][0]); !strings.Contains(strings.Join(hc.Test, " "), want) {
			t.Errorf("simllm healthcheck %q does not ask port %d", hc.Test, ports["simllm"][0])
		}
	}
}

func modelOf(simllmCmd makerCmd) string {
	if m, ok := simllmCmd.flags["model"]; ok {
		return m
	}
	return simllm.DefaultModel
}

func hasAny(args []string, names ...string) bool {
	for _, a := range args {
		if slices.Contains(names, a) {
			return true
		}
	}
	return false
}

func argAfter(args []string, names ...string) string {
	for i, a := range args {
		if slices.Contains(names, a) && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func checkMounted(t *testing.T, where, dir string, volumes []string) {
	t.Helper()
	if dir == "" {
		t.Errorf("%s: no data directory set", where)
		return
	}
	for _, v := range volumes {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == dir {
			return
		}
	}
	t.Errorf("%s: %s is on no volume (%q)", where, dir, volumes)
}

// ---- Kubernetes ----------------------------------------------------------

// known lists the apiVersion and kind pairs the manifests may use, and
// whether the kind is namespaced.
var known = map[string]bool{
	"v1/Namespace":                           false,
	"v1/Service":                             true,
	"v1/Secret":                              true,
	"v1/ConfigMap":                           true,
	"v1/ServiceAccount":                      true,
	"apps/v1/Deployment":                     true,
	"apps/v1/StatefulSet":                    true,
	"autoscaling/v2/HorizontalPodAutoscaler": true,
	"policy/v1/PodDisruptionBudget":          true,
	"networking.k8s.io/v1/NetworkPolicy":     true,
	"keda.sh/v1alpha1/ScaledObject":          true,
}

type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec       yaml.Node         `yaml:"spec"`
	StringData map[string]string `yaml:"stringData"`
	Data       map[string]string `yaml:"data"`

	file string
}

func (o *object) String() string { return o.file + ": " + o.Kind + "/" + o.Metadata.Name }

type labelSelector struct {
	MatchLabels      map[string]string `yaml:"matchLabels"`
	MatchExpressions []labelExpr       `yaml:"matchExpressions"`
}

// matches says whether sel selects labels; an empty selector selects nothing here.
func matches(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

type workload struct {
	Replicas    *int          `yaml:"replicas"`
	ServiceName string        `yaml:"serviceName"`
	Selector    labelSelector `yaml:"selector"`
	Template    struct {
		Metadata struct {
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"metadata"`
		Spec struct {
			Containers      []container `yaml:"containers"`
			InitContainers  []container `yaml:"initContainers"`
			SecurityContext struct {
				RunAsNonRoot *bool `yaml:"runAsNonRoot"`
			} `yaml:"securityContext"`
			Volumes []struct {
				Name string `yaml:"name"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	} `yaml:"template"`
	VolumeClaimTemplates []struct {
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
	} `yaml:"volumeClaimTemplates"`

	obj *object
}

// hasVolume says whether a pod volume or a claim template is called name.
func (w *workload) hasVolume(name string) bool {
	for _, v := range w.Template.Spec.Volumes {
		if v.Name == name {
			return true
		}
	}
	return w.hasClaim(name)
}

func (w *workload) hasClaim(name string) bool {
	for _, v := range w.VolumeClaimTemplates {
		if v.Metadata.Name == name {
			return true
		}
	}
	return false
}

// intOrString is a port given by number or by name.
type intOrString string

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error { *v = intOrString(n.Value); return nil }

type probe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
	TCPSocket *struct {
		Port intOrString `yaml:"port"`
	} `yaml:"tcpSocket"`
	Exec *struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
}

type container struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	Command         []string `yaml:"command"`
	Args            []string `yaml:"args"`
	Ports           []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name     string `yaml:"name"`
				Key      string `yaml:"key"`
				Optional bool   `yaml:"optional"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	StartupProbe   *probe `yaml:"startupProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
}

// argv is what the container runs; a maker container leaves the
// entrypoint alone or names maker first.
func (c container) argv() []string {
	if len(c.Command) > 0 {
		return append(slices.Clone(c.Command), c.Args...)
	}
	return c.Args
}

func (c container) isMaker() bool { r, _ := splitImage(c.Image); return r == makerImage }

// makerArgs are a maker container's arguments after the program name.
func (c container) makerArgs() []string {
	if len(c.Command) > 0 && filepath.Base(c.Command[0]) == "maker" {
		return append(slices.Clone(c.Command[1:]), c.Args...)
	}
	return c.Args
}

// port resolves a named or numbered port of the container.
func (c container) port(p intOrString) (int, bool) {
	for _, cp := range c.Ports {
		if string(p) == cp.Name || string(p) == strconv.Itoa(cp.ContainerPort) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

type service struct {
	ClusterIP string            `yaml:"clusterIP"`
	Selector  map[string]string `yaml:"selector"`
	Ports     []struct {
		Name       string      `yaml:"name"`
		Port       int         `yaml:"port"`
		TargetPort intOrString `yaml:"targetPort"`
	} `yaml:"ports"`
}

type hpa struct {
	ScaleTargetRef struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Name       string `yaml:"name"`
	} `yaml:"scaleTargetRef"`
	MinReplicas *int     `yaml:"minReplicas"`
	MaxReplicas int      `yaml:"maxReplicas"`
	Metrics     []metric `yaml:"metrics"`
}

type metric struct {
	Type     string `yaml:"type"`
	Resource *struct {
		Name   string `yaml:"name"`
		Target struct {
			Type               string `yaml:"type"`
			AverageUtilization int    `yaml:"averageUtilization"`
		} `yaml:"target"`
	} `yaml:"resource"`
}

// loadK8s parses every YAML document under k8s/.
func loadK8s(t *testing.T) []*object {
	t.Helper()
	var objs []*object
	err := filepath.WalkDir("k8s", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
			t.Errorf("%s: not a .yaml file", path)
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		dec := yaml.NewDecoder(f)
		for i := 0; ; i++ {
			o := &object{file: path}
			err := dec.Decode(o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("%s document %d: %w", path, i, err)
			}
			if o.Kind == "" && o.APIVersion == "" {
				continue // an empty document
			}
			objs = append(objs, o)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatal("no manifests under k8s/")
	}
	return objs
}

func decodeSpec(t *testing.T, o *object, v any) {
	t.Helper()
	if err := o.Spec.Decode(v); err != nil {
		t.Fatalf("%s: spec: %v", o, err)
	}
}

// cluster is every manifest under k8s/, indexed.
type cluster struct {
	workloads []*workload
	services  map[string]*service
	secrets   map[string]*object
	hpas      []*object
	pdbs      []*object
	scaled    []*object // KEDA ScaledObjects
	netpols   []*object
	configs   map[string]*object // ConfigMaps
	// kedaMonitor is where KEDA's nats-jetstream scaler connects.
	kedaMonitor *target
	// cmds holds each maker workload's command line, by workload name.
	cmds map[string]makerCmd
	// servicePort maps "service:port" to the container port it reaches.
	servicePort map[string]int
}

// index checks what every object needs (a known kind, a name, the
// namespace, no duplicates) and sorts the objects by kind.
func index(t *testing.T, objs []*object) *cluster {
	t.Helper()
	k := &cluster{services: map[string]*service{}, secrets: map[string]*object{}, configs: map[string]*object{},
		cmds: map[string]makerCmd{}, servicePort: map[string]int{}}
	seen := map[string]bool{}
	hasNS := false
	for _, o := range objs {
		gk := o.APIVersion + "/" + o.Kind
		namespaced, ok := known[gk]
		if !ok {
			t.Errorf("%s: unknown apiVersion/kind %s", o, gk)
			continue
		}
		if o.Metadata.Name == "" {
			t.Errorf("%s: no metadata.name", o)
		}
		if namespaced && o.Metadata.Namespace != namespace {
			t.Errorf("%s: namespace %q, want %q", o, o.Metadata.Namespace, namespace)
		}
		if key := gk + "/" + o.Metadata.Name; seen[key] {
			t.Errorf("%s: defined twice", o)
		}
		seen[gk+"/"+o.Metadata.Name] = true
		switch o.Kind {
		case "Namespace":
			hasNS = hasNS || o.Metadata.Name == namespace
		case "Deployment", "StatefulSet":
			w := &workload{obj: o}
			decodeSpec(t, o, w)
			k.workloads = append(k.workloads, w)
		case "Service":
			s := &service{}
			decodeSpec(t, o, s)
			k.services[o.Metadata.Name] = s
		case "HorizontalPodAutoscaler":
			k.hpas = append(k.hpas, o)
		case "PodDisruptionBudget":
			k.pdbs = append(k.pdbs, o)
		case "ScaledObject":
			k.scaled = append(k.scaled, o)
		case "NetworkPolicy":
			k.netpols = append(k.netpols, o)
		case "ConfigMap":
			k.configs[o.Metadata.Name] = o
		case "Secret":
			k.secrets[o.Metadata.Name] = o
		}
	}
	if !hasNS {
		t.Errorf("no Namespace %q", namespace)
	}
	return k
}

func (k *cluster) workload(kind, name string) *workload {
	for _, w := range k.workloads {
		if w.obj.Kind == kind && w.obj.Metadata.Name == name {
			return w
		}
	}
	return nil
}

// selected returns the one workload whose pods sel selects.
func (k *cluster) selected(t *testing.T, where string, sel map[string]string) *workload {
	t.Helper()
	var got []*workload
	for _, w := range k.workloads {
		if matches(sel, w.Template.Metadata.Labels) {
			got = append(got, w)
		}
	}
	if len(got) != 1 {
		t.Errorf("%s: selector %v selects %d workloads, want 1", where, sel, len(got))
		return nil
	}
	return got[0]
}

func TestKubernetes(t *testing.T) {
	t.Parallel()
	k := index(t, loadK8s(t))
	// In order: later checks use what earlier ones collected.
	k.checkWorkloads(t)
	k.checkServices(t)
	k.checkEndpoints(t)
	k.checkShape(t)
	k.checkScaling(t)
	k.checkScaledObjects(t)
	k.checkProbes(t)
	k.checkNetworkPolicies(t)
}

// checkWorkloads: replicas, selectors, non-root pods, pinned images,
// requests and limits, volumes, probe ports, secret references, and maker
// command lines the CLI accepts.
func (k *cluster) checkWorkloads(t *testing.T) {
	for _, w := range k.workloads {
		o := w.obj
		if w.Replicas == nil || *w.Replicas < 1 {
			t.Errorf("%s: replicas not set", o)
		}
		if !matches(w.Selector.MatchLabels, w.Template.Metadata.Labels) {
			t.Errorf("%s: selector %v does not select its own pods %v", o, w.Selector.MatchLabels, w.Template.Metadata.Labels)
		}
		if rn := w.Template.Spec.SecurityContext.RunAsNonRoot; rn == nil || !*rn {
			t.Errorf("%s: pods do not set runAsNonRoot", o)
		}
		if len(w.Template.Spec.Containers) == 0 {
			t.Errorf("%s: no containers", o)
		}
		for _, c := range slices.Concat(w.Template.Spec.InitContainers, w.Template.Spec.Containers) {
			k.checkContainer(t, w, c)
		}
	}
}

func (k *cluster) checkContainer(t *testing.T, w *workload, c container) {
	where := fmt.Sprintf("%s container %s", w.obj, c.Name)
	checkImage(t, where, c.Image)
	for kind, m := range map[string]map[string]string{"requests": c.Resources.Requests, "limits": c.Resources.Limits} {
		for _, res := range []string{"cpu", "memory"} {
			if m[res] == "" {
				t.Errorf("%s: no %s %s", where, res, kind)
			}
		}
	}
	for _, vm := range c.VolumeMounts {
		if !w.hasVolume(vm.Name) {
			t.Errorf("%s: mounts unknown volume %q", where, vm.Name)
		}
	}
	for _, p := range []*probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		var port intOrString
		switch {
		case p == nil:
			continue
		case p.HTTPGet != nil:
			port = p.HTTPGet.Port
		case p.TCPSocket != nil:
			port = p.TCPSocket.Port
		default:
			continue
		}
		if _, ok := c.port(port); !ok {
			t.Errorf("%s: probe port %q is no container port", where, port)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		s, ok := k.secrets[ref.Name]
		if !ok {
			t.Errorf("%s: env %s: no Secret %q (not even a template)", where, e.Name, ref.Name)
			continue
		}
		_, inString := s.StringData[ref.Key]
		_, inData := s.Data[ref.Key]
		if !inString && !inData {
			t.Errorf("%s: env %s: Secret %s has no key %q", where, e.Name, ref.Name, ref.Key)
		}
		if !ref.Optional && strings.Contains(s.file, "template") {
			t.Errorf("%s: env %s: Secret %s is only a template; make the reference optional", where, e.Name, ref.Name)
		}
	}
	if !c.isMaker() {
		return
	}
	mc, err := parseMaker(c.makerArgs())
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	k.cmds[w.obj.Metadata.Name] = mc
	if mc.sub == "simllm" {
		p := listenPorts(t, where, c.Image, c.makerArgs())[0]
		if _, ok := c.port(intOrString(strconv.Itoa(p))); !ok {
			t.Errorf("%s: listens on %d, which is no container port", where, p)
		}
	}
}

// checkServices: each Service selects one workload and its target ports
// are container ports the server listens on; a StatefulSet's governing
// Service is headless.
func (k *cluster) checkServices(t *testing.T) {
	for name, s := range k.services {
		where := "Service " + name
		w := k.selected(t, where, s.Selector)
		if w == nil {
			continue
		}
		for _, p := range s.Ports {
			tp := cmp.Or(p.TargetPort, intOrString(strconv.Itoa(p.Port)))
			found := false
			for _, c := range w.Template.Spec.Containers {
				cp, ok := c.port(tp)
				if !ok {
					continue
				}
				found = true
				k.servicePort[fmt.Sprintf("%s:%d", name, p.Port)] = cp
				if c.isMaker() {
					continue // simllm's port was checked with its container
				}
				if listen := listenPorts(t, where, c.Image, c.argv()); !slices.Contains(listen, cp) {
					t.Errorf("%s: port %d reaches container port %d, but %s listens on %v", where, p.Port, cp, c.Image, listen)
				}
			}
			if !found {
				t.Errorf("%s: targetPort %q is no container port of %s", where, tp, w.obj)
			}
		}
	}
	for _, w := range k.workloads {
		if w.obj.Kind != "StatefulSet" {
			continue
		}
		if s, ok := k.services[w.ServiceName]; !ok || s.ClusterIP != "None" {
			t.Errorf("%s: serviceName %q is no headless Service", w.obj, w.ServiceName)
		}
	}
	for _, o := range k.pdbs {
		var p struct {
			Selector labelSelector `yaml:"selector"`
		}
		decodeSpec(t, o, &p)
		k.selected(t, o.String(), p.Selector.MatchLabels)
	}
}

// checkEndpoints: every URL in a maker command names a Service port.
func (k *cluster) checkEndpoints(t *testing.T) {
	for name, c := range k.cmds {
		for _, e := range endpoints(t, "k8s "+name, c) {
			host := strings.TrimSuffix(strings.TrimSuffix(e.host, ".svc.cluster.local"), ".svc")
			host = strings.TrimSuffix(host, "."+namespace)
			if _, ok := k.services[host]; !ok {
				t.Errorf("k8s %s: --%s host %q is no Service", name, e.flag, e.host)
				continue
			}
			if _, ok := k.servicePort[fmt.Sprintf("%s:%d", host, e.port)]; !ok {
				t.Errorf("k8s %s: --%s port %d is no port of Service %s", name, e.flag, e.port, host)
			}
		}
	}
}

// checkShape: the fleet this directory promises.
func (k *cluster) checkShape(t *testing.T) {
	for name, want := range map[string]int{"coordinator": 2, "voter": 3} {
		w := k.workload("Deployment", name)
		if w == nil {
			t.Errorf("no Deployment %s", name)
			continue
		}
		if w.Replicas == nil || *w.Replicas != want {
			t.Errorf("Deployment %s: replicas %s, want %d", name, show(w.Replicas), want)
		}
		if k.cmds[name].sub != name {
			t.Errorf("Deployment %s runs maker %q", name, k.cmds[name].sub)
		}
	}
	if _, ok := k.cmds["voter"].flags["concurrency"]; !ok {
		t.Errorf("voter: no --concurrency")
	}
	if got, want := k.cmds["voter"].flags["model"], modelOf(k.cmds["simllm"]); got != want {
		t.Errorf("voter --model %q, the simulated model serves %q", got, want)
	}
	if k.workload("Deployment", "simllm") == nil {
		t.Errorf("no Deployment simllm")
	}
	if nats := k.workload("StatefulSet", "nats"); nats == nil {
		t.Errorf("no StatefulSet nats")
	} else {
		c := nats.Template.Spec.Containers[0]
		if !hasAny(c.argv(), "--jetstream", "-js") {
			t.Errorf("nats: JetStream is off (%q)", c.argv())
		}
		checkClaim(t, nats, c, argAfter(c.argv(), "--store_dir", "-sd"))
	}
	if redis := k.workload("StatefulSet", "redis"); redis == nil {
		t.Errorf("no StatefulSet redis")
	} else {
		c := redis.Template.Spec.Containers[0]
		if argAfter(c.argv(), "--appendonly") != "yes" {
			t.Errorf("redis: appendonly is off (%q)", c.argv())
		}
		checkClaim(t, redis, c, argAfter(c.argv(), "--dir"))
	}
	if _, ok := k.secrets["maker-llm"]; !ok {
		t.Errorf("no Secret template maker-llm")
	}
}

// checkScaling: any HorizontalPodAutoscaler scales a known workload on
// CPU from its replica count up. The voters have none: KEDA scales them
// (checkScaledObjects), and two autoscalers on one Deployment fight.
func (k *cluster) checkScaling(t *testing.T) {
	for _, o := range k.hpas {
		var h hpa
		decodeSpec(t, o, &h)
		ref := h.ScaleTargetRef
		w := k.workload(ref.Kind, ref.Name)
		if w == nil || ref.APIVersion != w.obj.APIVersion {
			t.Errorf("%s: scales unknown %s %s/%s", o, ref.APIVersion, ref.Kind, ref.Name)
			continue
		}
		if h.MinReplicas == nil || *h.MinReplicas < 1 || *h.MinReplicas > h.MaxReplicas {
			t.Errorf("%s: replicas %s..%d", o, show(h.MinReplicas), h.MaxReplicas)
		} else if w.Replicas != nil && (*w.Replicas < *h.MinReplicas || *w.Replicas > h.MaxReplicas) {
			t.Errorf("%s: %s has %d replicas, outside %d..%d", o, w.obj, *w.Replicas, *h.MinReplicas, h.MaxReplicas)
		}
		cpu := slices.ContainsFunc(h.Metrics, func(m metric) bool {
			return m.Type == "Resource" && m.Resource != nil && m.Resource.Name == "cpu" && m.Resource.Target.AverageUtilization > 0
		})
		if !cpu {
			t.Errorf("%s: no CPU utilization metric", o)
		}
		for _, c := range w.Template.Spec.Containers {
			if c.Resources.Requests["cpu"] == "" {
				t.Errorf("%s: container %s has no CPU request to scale on", o, c.Name)
			}
		}
		if ref.Name == "voter" {
			t.Errorf("%s: the voters scale on the samples lag (KEDA), not on CPU", o)
		}
	}
}

func show(p *int) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(*p)
}

// checkClaim: dir is mounted from one of the StatefulSet's claims.
func checkClaim(t *testing.T, w *workload, c container, dir string) {
	t.Helper()
	if dir == "" {
		t.Errorf("%s: no data directory set", w.obj)
		return
	}
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == dir && w.hasClaim(vm.Name) {
			return
		}
	}
	t.Errorf("%s: %s is on no PersistentVolumeClaim", w.obj, dir)
}

// The same third-party servers run everywhere, and NATS is the version the
// tests run in process.
func TestImagesAgree(t *testing.T) {
	t.Parallel()
	cf := loadCompose(t)
	objs := loadK8s(t)
	k8sImages := map[string]string{} // repo → image
	for _, o := range objs {
		if o.Kind != "Deployment" && o.Kind != "StatefulSet" {
			continue
		}
		var w workload
		decodeSpec(t, o, &w)
		for _, c := range w.Template.Spec.Containers {
			repo, _ := splitImage(c.Image)
			k8sImages[repo] = c.Image
		}
	}
	for name, s := range cf.Services {
		if s.isMaker() {
			continue
		}
		repo, _ := splitImage(s.Image)
		if k, ok := k8sImages[repo]; ok && k != s.Image {
			t.Errorf("compose %s runs %s, k8s runs %s", name, s.Image, k)
		}
	}
	natsImage := cf.Services["nats"].Image
	_, tag := splitImage(natsImage)
	if got, want := minor(tag), minor(goModVersion(t, "github.com/nats-io/nats-server/v2")); got != want {
		t.Errorf("nats image %s is %s; the tests run nats-server %s (go.mod)", natsImage, got, want)
	}
}

// ---- prose -----------------------------------------------------------------

// TestTakeoverClaims: the deploy docs and manifests describe takeover as it
// is. A job is durable (a lease with a fencing token, resumed at its last
// journaled step within the lease TTL); before that a taken-over job started
// again from step 0 after the job stream's ack wait, and these files said so.
func TestTakeoverClaims(t *testing.T) {
	stale := []*regexp.Regexp{
		regexp.MustCompile(`(?i)from step 0`),
		regexp.MustCompile(`(?i)resuming is the next issue`),
		regexp.MustCompile(`(?i)takes? (it|them|its jobs) over after the job's ack wait`),
	}
	files := []string{"README.md", "docker-compose.yml"}
	k8s, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(k8s) == 0 {
		t.Fatalf("k8s manifests: %v", err)
	}
	files = append(files, k8s...)
	// Comments wrap: read each file as one line of words.
	comment := regexp.MustCompile(`(?m)^\s*#\s?`)
	text := map[string]string{}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text[name] = strings.Join(strings.Fields(comment.ReplaceAllString(string(b), " ")), " ")
		for _, re := range stale {
			if m := re.FindString(text[name]); m != "" {
				t.Errorf("%s: %q: a taken-over job resumes at its last journaled step, within the lease TTL", name, m)
			}
		}
	}
	for _, name := range []string{"README.md", "k8s/40-coordinator.yaml"} {
		for _, want := range []string{"lease", "fencing token", "--lease-ttl", "last journaled step"} {
			if !strings.Contains(text[name], want) {
				t.Errorf("%s does not say how a job is taken over: no %q", name, want)
			}
		}
	}
}
