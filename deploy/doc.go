// Package deploy holds the fleet's deployment files, not code: the image
// (Dockerfile), a single-host stack (docker-compose.yml) and Kubernetes
// manifests (k8s/). README.md says how to run them.
//
// Its tests check the files statically, without Docker or a cluster: they
// parse as YAML, every `maker ...` command line in them is accepted by the
// real command line (cli.Main) and uses only flags its help lists, service
// names and ports line up, replicas and resource limits are set, and
// third-party images are pinned.
package deploy
