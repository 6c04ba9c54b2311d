//go:build tools

// Package promoperator pins the Prometheus Operator and its config reloader,
// which the kind e2e test runs in the cluster with their CRDs, as
// kube-prometheus-stack does (hack/kind/bin.sh builds their images). A module
// of its own: the operator is built against older Kubernetes and Prometheus
// modules than the exporter.
package promoperator

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
	_ "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
)
