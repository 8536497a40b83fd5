// Package deploy holds the fleet's deployment files, not code: the image
// (Dockerfile), a single-host stack (docker-compose.yml), Kubernetes
// manifests (k8s/), a Grafana dashboard (grafana/) and Prometheus
// configuration and alerting rules (prometheus/). README.md says how to run
// them.
//
// Its tests check the files statically, without Docker or a cluster: they
// parse as YAML, every `maker ...` command line in them is accepted by the
// real command line (cli.Main) and uses only flags its help lists, service
// names and ports line up, replicas and resource limits are set, and
// third-party images are pinned. The KEDA ScaledObject is validated against
// KEDA's CRD schema (testdata/) and names the stream and consumer
// internal/bus does; probes ask /healthz and /readyz on --metrics-addr; the
// NetworkPolicies allow exactly the connections the command lines make; and
// every dashboard query and alert expression names only metrics that
// internal/metrics registers.
package deploy
