//go:build tools

// Package promoperator pins the Prometheus Operator, whose CRDs the kind e2e
// test installs (hack/kind/bin.sh). A module of its own: the operator is
// built against older Kubernetes and Prometheus modules than the exporter.
package promoperator

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
	_ "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
)
